package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// earlierRelease is the commit of this repository whose hook creates the
// clusters that the current build then takes over: the last before the
// serving label (f106e95), so that the takeover relabels every member Pod
// and switches the client Service's selector, the most an upgrade of the
// hook has had to change on running clusters. Its main package was
// ./server then.
const (
	earlierRelease     = "6d3c31bb508e81d87b9acf3e5ccbef2119153f34"
	earlierReleaseMain = "./server"
)

// earlierHook builds the hook of earlierRelease from the repository's own
// history, in a git worktree, once: the binary is kept in bin/ under the
// commit's name. It skips, saying why, only where the history does not
// hold the commit (a shallow clone, an exported tree).
func earlierHook(t *testing.T) string {
	t.Helper()
	root := testenv.ModuleRoot(t)
	bin := filepath.Join(root, "bin", "etcd-hook-"+earlierRelease[:12])
	if testenv.Executable(bin) == nil {
		return bin
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", earlierRelease+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("the repository's history does not hold %s (%v: %s): the hook upgrade from it cannot be built here", earlierRelease[:12], err, out)
	}
	src := filepath.Join(t.TempDir(), "src")
	git := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("git", append([]string{"-C", root}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	git("worktree", "prune")
	git("worktree", "add", "--detach", src, earlierRelease)
	defer git("worktree", "remove", "--force", src)
	build := exec.Command("go", "build", "-trimpath", "-o", bin+".tmp", earlierReleaseMain)
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the hook of %s: %v: %s", earlierRelease[:12], err, out)
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the hook of %s from a git worktree in %s", earlierRelease[:12], time.Since(start).Round(time.Second))
	return bin
}

// pvcCluster is the second cluster of the upgrade: plain, on PVCs.
const pvcCluster = "pvc-cluster"

// Replacing the hook restarts nothing. Two clusters made by the hook of
// an earlier commit (one on emptyDir with TLS, one plain on PVCs), under
// writers and the checker, are taken over by the current build: no Pod
// is recreated, no container restarts, no membership changes, the status
// and its conditions carry over, and a scale-out afterwards works.
func TestOperatorUpgradeRestartsNothing(t *testing.T) {
	old := earlierHook(t)
	current := testenv.Binary(t, testenv.Hook)
	s := newTLSScenario(t, harness.Options{HookBinary: old, ClusterCustomize: true})

	// The clusters, as the earlier release makes them.
	by := "by " + earlierRelease[:7]
	s.createSpec("TLS on emptyDir, "+by, map[string]any{"size": 3, "version": faultVersion, "TLS": tlsSpec})
	p := &scenario{t: t, env: s.env, c: &Cluster{Env: s.env, Namespace: ns, Name: pvcCluster}}
	p.startWriter("pvc")
	if _, err := s.env.MC.CreateParent(ns, pvcCluster, map[string]any{"size": 3, "version": faultVersion, "pod": map[string]any{
		"persistentVolumeClaimSpec": map[string]any{"accessModes": []string{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, members, err := p.c.WaitConverged(convergeTimeout, 3); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("plain on PVCs, %s: converged: %s", by, members)
	}
	if t.Failed() {
		return
	}
	s.startWriter("operator-upgrade")
	clusters := []*scenario{s.scenario, p}
	type before struct {
		world      faultWorld
		restarts   map[string]int32
		logged     int
		conditions map[string]condition
		seed       string
	}
	was := map[string]before{}
	for _, c := range clusters {
		c.waitWrites(writesAround)
		b := before{world: c.world(c.c.PodNames()), restarts: map[string]int32{}, logged: len(c.loggedActions()), conditions: conditionsOf(t, c.c)}
		for _, pod := range c.c.Pods() {
			b.restarts[pod.Name] = pod.Restarts
		}
		_, st, _ := c.c.Parent()
		b.seed = st.Bootstrap.SeedMember + "/" + st.Bootstrap.ClusterID
		was[c.c.Name] = b
		if labelled := servingLabelled(c); len(labelled) != 0 {
			t.Fatalf("%s: the earlier release's Pods carry the serving label already (%v): the takeover would prove less than it says", c.c.Name, labelled)
		}
	}

	// The hook replaced by the current build, in place, as a rolling
	// update of its Deployment does: SIGTERM, then the new binary.
	start := time.Now()
	s.env.Hook.Stop(10 * time.Second)
	s.env.Hook.Binary = current
	if err := s.env.Hook.Start(s.env.Ctx()); err != nil {
		t.Fatal(err)
	}
	// Metacontroller would call the new hook at each parent's next resync
	// (up to a minute for a steady cluster); asking now only saves that
	// wait.
	for _, c := range clusters {
		s.env.MC.Enqueue(ns, c.c.Name)
	}
	for _, c := range clusters {
		name := c.c.Name
		err := s.env.WaitFor(convergeTimeout, name+": every member Pod carries the serving label and the client Service selects it", func() (bool, string) {
			svc, _ := s.env.API.Get(harness.Ref{Type: harness.TypeService, Namespace: ns, Name: c.c.clientServiceName()})
			sel, _ := svc["spec"].(map[string]any)["selector"].(map[string]any)
			labelled := servingLabelled(c)
			return sel[servingLabel] == "true" && len(labelled) == 3, fmt.Sprintf("selector %v, labelled %v", sel, labelled)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	adopted := time.Since(start)
	// Three more answered syncs of each, by the new hook, before judging.
	since := time.Now()
	for _, c := range clusters {
		err := s.env.WaitFor(convergeTimeout, c.c.Name+": three syncs answered by the new hook", func() (bool, string) {
			answered := 0
			for _, r := range s.env.MC.Records(ns, c.c.Name) {
				if r.Start.After(since) && r.HTTPStatus == http.StatusOK {
					answered++
				}
			}
			if answered < 3 {
				s.env.MC.Enqueue(ns, c.c.Name)
			}
			return answered >= 3, fmt.Sprintf("%d answered", answered)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("taken over by the current build: Pods relabelled and the client Services switched %s after the new hook started; judged %s later", round(adopted), round(time.Since(since)))
	for _, c := range clusters {
		name := c.c.Name
		b := was[name]
		c.checkWorld(name+": hook upgrade", b.world, c.c.PodNames())
		c.checkNoMembershipChange(name+": hook upgrade", b.logged)
		for _, pod := range c.c.Pods() {
			if pod.Restarts != b.restarts[pod.Name] {
				t.Errorf("%s: hook upgrade: member %s restarted (%d restarts, %d before)", name, pod.Name, pod.Restarts, b.restarts[pod.Name])
			}
		}
		_, st, _ := c.c.Parent()
		if seed := st.Bootstrap.SeedMember + "/" + st.Bootstrap.ClusterID; seed != b.seed {
			t.Errorf("%s: hook upgrade: the bootstrap record changed: %s, was %s", name, seed, b.seed)
		}
		now := conditionsOf(t, c.c)
		for typ, was := range b.conditions {
			got, ok := now[typ]
			switch {
			case !ok:
				t.Errorf("%s: hook upgrade: condition %s is gone", name, typ)
			case got.Status != was.Status:
				t.Errorf("%s: hook upgrade: condition %s went %s → %s (%s)", name, typ, was.Status, got.Status, got.Message)
			case got.LastTransitionTime != was.LastTransitionTime:
				t.Errorf("%s: hook upgrade: condition %s kept its status %s but its lastTransitionTime moved %s → %s", name, typ, was.Status, was.LastTransitionTime, got.LastTransitionTime)
			}
		}
		if status, reason := st.Condition("Ready"); status != "True" || st.Phase != "Running" {
			t.Errorf("%s: after the hook upgrade: phase %s, Ready %s (%s)", name, st.Phase, status, reason)
		}
		c.verifyWrites(name + ": hook upgrade")
	}

	// A scale-out afterwards, by the current build.
	p.startWriter("pvc-scale-out")
	startScale, syncs := time.Now(), s.env.MC.Metrics(ns, pvcCluster).Syncs
	if _, err := s.env.MC.MergePatchParentSpec(ns, pvcCluster, map[string]any{"size": 5}); err != nil {
		t.Fatal(err)
	}
	at, members, err := p.c.WaitConverged(convergeTimeout, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: scaled out to 5 in %s (%d syncs): %s", pvcCluster, round(at.Sub(startScale)), s.env.MC.Metrics(ns, pvcCluster).Syncs-syncs, members)
	p.waitWrites(writesAround)
	p.verifyWrites(pvcCluster + ": scale-out after the hook upgrade")
}

// condition is a status condition as the API server holds it.
type condition struct {
	Status, Reason, Message, LastTransitionTime string
}

// conditionsOf reads the parent's conditions by type, with their
// lastTransitionTime (which ParentStatus leaves out).
func conditionsOf(t *testing.T, c *Cluster) map[string]condition {
	t.Helper()
	obj, ok := c.Env.MC.Parent(c.Namespace, c.Name)
	if !ok {
		t.Fatalf("%s: no parent", c.Name)
	}
	var p struct {
		Status struct {
			Conditions []struct {
				Type, Status, Reason, Message, LastTransitionTime string
			} `json:"conditions"`
		} `json:"status"`
	}
	data, _ := json.Marshal(obj)
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	out := map[string]condition{}
	for _, c := range p.Status.Conditions {
		out[c.Type] = condition{c.Status, c.Reason, c.Message, c.LastTransitionTime}
	}
	return out
}

// servingLabelled are the cluster's member Pods carrying the serving label.
func servingLabelled(s *scenario) []string {
	var out []string
	for _, name := range s.c.PodNames() {
		pod, _ := s.env.API.Get(harness.Ref{Type: harness.TypePod, Namespace: ns, Name: name})
		if labels, _ := pod["metadata"].(map[string]any)["labels"].(map[string]any); labels[servingLabel] == "true" {
			out = append(out, name)
		}
	}
	return out
}
