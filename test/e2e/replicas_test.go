package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/shard"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// Two hook replicas with --peers behind a Service, as the chart deploys
// them: the cluster is synced by the replica that owns it whichever one
// Metacontroller's requests reach, and only that one holds its series.
// Killed in the middle of a scale-out, the owner costs no sync: the other
// replica answers for it, the scale-out completes and no acknowledged
// write is lost. Restarted, the owner takes the cluster back.
func TestReplicasShareTheFleet(t *testing.T) {
	testenv.Binary(t, testenv.Etcd(currentVersion))
	env := harness.New(t, harness.Options{HookReplicas: 2})
	s := &scenario{t: t, env: env, c: &Cluster{Env: env, Namespace: ns, Name: exampleName}}
	hooks := s.env.Hooks
	s.create("replicas: create, size 3", currentVersion, 3)
	if t.Failed() {
		return
	}

	obj, _ := s.env.MC.Parent(ns, exampleName)
	uid, _ := obj["metadata"].(map[string]any)["uid"].(string)
	addrs := []string{hooks[0].Addr(), hooks[1].Addr()}
	owner := slices.Index(addrs, shard.Owner(uid, slices.Sorted(slices.Values(addrs))))
	other := 1 - owner
	if s.env.Service.Answered(other) == 0 || s.env.Service.Answered(owner) == 0 {
		t.Fatalf("the Service sent %d requests to the owner and %d to the other replica: both must receive some for the test to prove routing",
			s.env.Service.Answered(owner), s.env.Service.Answered(other))
	}
	series := func(i int) map[string]float64 {
		t.Helper()
		got, err := clusterSeries(hooks[i].URL(), ns, exampleName)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := series(owner); got["etcd_cluster_ready_members"] != 3 {
		t.Errorf("the owner (replica %d) reports %v ready members, want 3: %v", owner, got["etcd_cluster_ready_members"], got)
	}
	if got := series(other); len(got) != 0 {
		t.Errorf("replica %d, which does not own the cluster, serves its series: every sync it received must have gone to the owner: %v", other, got)
	}
	routed := routing(t, hooks[other].URL())
	if routed["forwarded"] == 0 || routed["owned"] != 0 {
		t.Errorf("replica %d routing %v: want syncs forwarded to the owner and none answered as its own", other, routed)
	}
	t.Logf("replicas: the Service sent %d requests to the owner (replica %d) and %d to the other, which forwarded them: routing %v and %v",
		s.env.Service.Answered(owner), owner, s.env.Service.Answered(other), routing(t, hooks[owner].URL()), routed)

	// The owner is killed under a writer; the cluster grows meanwhile.
	s.startWriter("replicas-owner-killed")
	s.waitWrites(writesAround)
	if err := hooks[owner].Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.patchSize(4)
	at, members, err := s.c.WaitConverged(convergeTimeout, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replicas: scaled to 4 with the owner killed in %s: %s", at.Sub(start).Round(time.Millisecond), members)
	if got := routing(t, hooks[other].URL()); got["fallback"] == 0 {
		t.Errorf("replica %d routing %v: the owner was dead, want syncs answered here as fallback", other, got)
	} else {
		t.Logf("replicas: with the owner dead, replica %d routing %v", other, got)
	}
	if got := series(other); got["etcd_cluster_ready_members"] != 4 {
		t.Errorf("replica %d answered the scale-out but reports %v ready members: %v", other, got["etcd_cluster_ready_members"], got)
	}

	// Restarted, the owner answers the cluster's syncs again.
	if err := hooks[owner].Start(s.env.Ctx()); err != nil {
		t.Fatal(err)
	}
	err = s.env.WaitFor(convergeTimeout, fmt.Sprintf("replica %d, restarted, answers the cluster's syncs again", owner), func() (bool, string) {
		got, err := clusterSeries(hooks[owner].URL(), ns, exampleName)
		if err != nil || got["etcd_cluster_ready_members"] != 4 {
			s.env.MC.Enqueue(ns, exampleName)
			return false, fmt.Sprintf("series %v (%v)", got, err)
		}
		return true, ""
	})
	if err != nil {
		t.Fatal(err)
	}
	s.waitWrites(writesAround)
	s.verifyWrites("replicas: owner killed during a scale-out")
}

// routing is a replica's etcd_hook_sync_routing_total by outcome.
func routing(t *testing.T, hookURL string) map[string]float64 {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Get(hookURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), `etcd_hook_sync_routing_total{outcome="`)
		if !ok {
			continue
		}
		outcome, value, _ := strings.Cut(rest, `"} `)
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics: cannot parse %q", sc.Text())
		}
		out[outcome] = v
	}
	return out
}
