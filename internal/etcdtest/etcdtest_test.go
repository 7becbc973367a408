package etcdtest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// versions returns the releases to test against: the built ones always, and
// Debian's 3.4 only when it is there, since fetching it is best effort.
func versions(t *testing.T) []string {
	vs := slices.Clone(etcdtest.BuiltVersions)
	if _, err := testenv.LookBinary(testenv.Etcd(etcdtest.Version34)); err == nil {
		vs = append([]string{etcdtest.Version34}, vs...)
	} else {
		t.Logf("not testing etcd %s: %v", etcdtest.Version34, err)
	}
	return vs
}

func newClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		// The client's own info logging would bury etcd's log tails.
		Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("clientv3.New: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The binaries are found by version; a drift between the Makefile and these
// constants would make tests skip (or fail in CI) for a confusing reason.
func TestVersionsMatchMakefile(t *testing.T) {
	b, err := os.ReadFile(testenv.Path(t, "mk/etcd.mk"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	re := regexp.MustCompile(`(?m)^(ETCD_3[0-9]_VERSION)\s*\??=\s*(\S+)\s*$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{
		"ETCD_34_VERSION": etcdtest.Version34,
		"ETCD_35_VERSION": etcdtest.Version35,
		"ETCD_36_VERSION": etcdtest.Version36,
		"ETCD_37_VERSION": etcdtest.Version37,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mk/etcd.mk versions mismatch (-want +got):\n%s", diff)
	}
}

func TestStartCluster(t *testing.T) {
	for _, v := range versions(t) {
		for _, size := range []int{1, 3} {
			t.Run(fmt.Sprintf("v%s/size-%d", v, size), func(t *testing.T) {
				start := time.Now()
				c := etcdtest.StartCluster(t, etcdtest.Options{Size: size, Version: v})
				t.Logf("%d-member etcd %s healthy after %v", size, v, time.Since(start).Round(time.Millisecond))

				if got := len(c.Endpoints()); got != size {
					t.Fatalf("Endpoints() has %d entries, want %d", got, size)
				}
				for _, m := range c.Members {
					if m.PID <= 0 {
						t.Errorf("member %s has PID %d", m.Name, m.PID)
					}
					for _, u := range []string{m.ClientURL, m.PeerURL} {
						if !strings.HasPrefix(u, "http://127.0.0.1:") {
							t.Errorf("member %s URL %q is not on 127.0.0.1", m.Name, u)
						}
					}
				}

				cli := newClient(t, c.Endpoints())
				ctx := testContext(t)
				resp, err := cli.MemberList(ctx)
				if err != nil {
					t.Fatalf("MemberList: %v", err)
				}
				type member struct {
					Name      string
					ClientURL string
					PeerURL   string
				}
				var want, got []member
				for _, m := range c.Members {
					want = append(want, member{m.Name, m.ClientURL, m.PeerURL})
				}
				for _, m := range resp.Members {
					if len(m.ClientURLs) != 1 || len(m.PeerURLs) != 1 {
						t.Fatalf("member %s has client URLs %v, peer URLs %v; want one of each", m.Name, m.ClientURLs, m.PeerURLs)
					}
					got = append(got, member{m.Name, m.ClientURLs[0], m.PeerURLs[0]})
				}
				byName := func(a, b member) int { return strings.Compare(a.Name, b.Name) }
				slices.SortFunc(got, byName)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("MemberList mismatch (-want +got):\n%s", diff)
				}

				key, val := "etcdtest/"+t.Name(), "value-"+v
				if _, err := cli.Put(ctx, key, val); err != nil {
					t.Fatalf("Put: %v", err)
				}
				// Read from each member so every process, not just the one
				// the client happened to pick, is shown to serve the data.
				for _, m := range c.Members {
					mc := newClient(t, []string{m.ClientURL})
					gr, err := mc.Get(ctx, key)
					if err != nil {
						t.Fatalf("Get from %s: %v", m.Name, err)
					}
					var gotVals []string
					for _, kv := range gr.Kvs {
						gotVals = append(gotVals, string(kv.Value))
					}
					if diff := cmp.Diff([]string{val}, gotVals); diff != "" {
						t.Errorf("Get %q from %s (-want +got):\n%s", key, m.Name, diff)
					}
				}
			})
		}
	}
}

func TestStopKillRestart(t *testing.T) {
	c := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	cli := newClient(t, c.Endpoints())
	ctx := testContext(t)

	c.Kill(0)
	if c.Members[0].PID != 0 || c.Members[0].Running() {
		t.Fatalf("after Kill: PID %d, running %v", c.Members[0].PID, c.Members[0].Running())
	}
	// Two of three members keep quorum, so writes must succeed again once a
	// new leader is elected (if the killed member was the leader, the first
	// attempts time out; clients do not retry a Put on their own).
	var err error
	for attempt := 1; attempt <= 10; attempt++ {
		if _, err = cli.Put(ctx, "k", "after-kill"); err == nil || ctx.Err() != nil {
			break
		}
		t.Logf("Put attempt %d with one member killed: %v", attempt, err)
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Put with one member killed: %v", err)
	}
	c.Restart(0)

	c.Stop(1)
	c.Stop(2)
	// Without quorum the restarted member cannot become healthy on its own,
	// which is why Start does not wait.
	c.Start(1)
	c.Start(2)
	c.WaitHealthy()

	mc := newClient(t, []string{c.Members[0].ClientURL})
	gr, err := mc.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if len(gr.Kvs) != 1 || string(gr.Kvs[0].Value) != "after-kill" {
		t.Errorf("Get k from restarted member = %v, want after-kill", gr.Kvs)
	}
}

type probe struct {
	Path   string
	Status int
	Body   string
}

func get(t *testing.T, ctx context.Context, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// TestLearner checks StartMember with the learner flow the hook drives, and
// records how a learner answers the health endpoints in each version: the
// hook must not mistake a healthy learner for a broken member or vice versa.
func TestLearner(t *testing.T) {
	for _, v := range versions(t) {
		t.Run("v"+v, func(t *testing.T) {
			c := etcdtest.StartCluster(t, etcdtest.Options{Version: v})
			cli := newClient(t, c.Endpoints())
			ctx := testContext(t)

			peerURL := etcdtest.FreeURL(t)
			add, err := cli.MemberAddAsLearner(ctx, []string{peerURL})
			if err != nil {
				t.Fatalf("MemberAddAsLearner: %v", err)
			}
			start := time.Now()
			l := etcdtest.StartMember(t, etcdtest.MemberOptions{
				Name:           "learner",
				InitialCluster: c.InitialClusterWith("learner", peerURL),
				Version:        v,
			})
			t.Logf("learner healthy after %v", time.Since(start).Round(time.Millisecond))
			if l.PeerURL != peerURL {
				t.Errorf("learner PeerURL = %q, want %q", l.PeerURL, peerURL)
			}

			resp, err := cli.MemberList(ctx)
			if err != nil {
				t.Fatalf("MemberList: %v", err)
			}
			type member struct {
				ID        uint64
				Name      string
				IsLearner bool
			}
			var got []member
			voterID := uint64(0)
			for _, m := range resp.Members {
				got = append(got, member{m.ID, m.Name, m.IsLearner})
				if m.Name == c.Members[0].Name {
					voterID = m.ID // derived from the random token, so not known in advance
				}
			}
			want := []member{
				{ID: add.Member.ID, Name: "learner", IsLearner: true},
				{ID: voterID, Name: c.Members[0].Name},
			}
			slices.SortFunc(got, func(a, b member) int { return strings.Compare(a.Name, b.Name) })
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("MemberList mismatch (-want +got):\n%s", diff)
			}

			var probes []probe
			for _, p := range []string{"/health", "/health?serializable=true", "/readyz", "/livez"} {
				status, body := get(t, ctx, l.ClientURL+p)
				probes = append(probes, probe{p, status, body})
				t.Logf("etcd %s learner GET %s: HTTP %d %q", v, p, status, body)
			}
			// /readyz lists its checks in random order; compare lines as a set.
			for i := range probes {
				if strings.HasPrefix(probes[i].Path, "/readyz") {
					lines := strings.Split(strings.TrimSpace(probes[i].Body), "\n")
					slices.Sort(lines)
					probes[i].Body = strings.Join(lines, "\n")
				}
			}
			if diff := cmp.Diff(wantLearnerProbes(v), probes); diff != "" {
				t.Errorf("learner health endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

// wantLearnerProbes is what each pinned release answered when this test was
// written. /health is healthy on a learner everywhere; only 3.5+'s /readyz
// singles learners out, and 3.4 has no /readyz or /livez at all.
func wantLearnerProbes(version string) []probe {
	healthy35 := `{"health":"true","reason":""}`
	switch version {
	case etcdtest.Version34:
		return []probe{
			{"/health", 200, `{"health":"true"}`},
			{"/health?serializable=true", 200, `{"health":"true"}`},
			{"/readyz", 404, "404 page not found"},
			{"/livez", 404, "404 page not found\n"},
		}
	default:
		return []probe{
			{"/health", 200, healthy35},
			{"/health?serializable=true", 200, healthy35},
			{"/readyz", 503, strings.Join([]string{
				"[+]data_corruption ok",
				"[+]linearizable_read ok",
				"[+]serializable_read ok",
				"[-]non_learner failed: not supported for learner",
			}, "\n")},
			{"/livez", 200, "ok\n"},
		}
	}
}
