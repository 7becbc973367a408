package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

const (
	ns = "default"
	// The name of the CoreOS seed example, manifests/examples/example-etcd-cluster.yaml.
	exampleName = "example-etcd-cluster"
	// convergeTimeout only stops a hang; it is no performance limit. A
	// healthy step takes seconds.
	convergeTimeout = 90 * time.Second
	// writesAround is how many acknowledged puts a scenario waits for before
	// its disruption and after convergence: before, so that the writer is
	// known to work; after, so that the converged cluster is known to serve.
	writesAround = 20
	// currentVersion is the release new clusters get by default: every
	// lifecycle scenario runs on it (create, scale, replace, faults,
	// backup, restore, rollout, housekeeping, the learner checks). The
	// other lines run where they prove something of their own: 3.6 is
	// upgraded from and downgraded to (upgrade_test.go, downgrade_test.go,
	// TestTLS starts on it); 3.5 is refused a skip to 3.7 and, in the long
	// tail, bootstraps three members, recovers from NOSPACE and upgrades to
	// 3.6; TestEveryLineTakesTheRenderedCommand starts each line with every
	// option.
	currentVersion = etcdtest.Version37
)

// scenario is one cluster in its own Env, with the writer of the step under way.
type scenario struct {
	t   *testing.T
	env *harness.Env
	c   *Cluster
	w   *Writer
	// h is the checker beside the writer (checker_test.go); histories
	// counts the checkers started, which number their keys.
	h         *stepHistory
	histories int
}

func newScenario(t *testing.T, version string) *scenario {
	t.Helper()
	testenv.Binary(t, testenv.Etcd(version))
	env := harness.New(t, harness.Options{})
	return &scenario{t: t, env: env, c: &Cluster{Env: env, Namespace: ns, Name: exampleName}}
}

// startWriter starts the writer of a step under /writer/<step>/.
func (s *scenario) startWriter(step string) {
	s.t.Helper()
	w, err := StartWriter(s.env.Ctx(), s.c.ServiceURL(), "/writer/"+step+"/")
	if err != nil {
		s.t.Fatal(err)
	}
	s.w = w
	s.t.Cleanup(w.Stop)
	s.startHistory(step)
}

func (s *scenario) waitWrites(n int) {
	s.t.Helper()
	if err := s.w.WaitAcked(s.env.Ctx(), n, 30*time.Second); err != nil {
		s.t.Fatal(err)
	}
}

// create creates the seed example at size members and waits for it; the
// writer starts with the creation and its first puts fail until there is a
// member to take them.
func (s *scenario) create(step, version string, size int) Figure {
	s.t.Helper()
	s.startWriter(step)
	start, syncs := time.Now(), s.syncs()
	if _, err := s.env.MC.CreateParent(ns, exampleName, map[string]any{"size": size, "version": version}); err != nil {
		s.t.Fatal(err)
	}
	return s.converge(step, start, syncs, size)
}

// syncs counts the hook calls (sync and finalize) made so far for the cluster.
func (s *scenario) syncs() int {
	m := s.env.MC.Metrics(ns, exampleName)
	return m.Syncs + m.Finalizes
}

// converge waits for size members after a change made at start (when
// syncsBefore syncs had been made), checks the writer and returns the step's
// figure.
func (s *scenario) converge(step string, start time.Time, syncsBefore, size int) Figure {
	s.t.Helper()
	at, members, err := s.c.WaitConverged(convergeTimeout, size)
	if err != nil {
		s.t.Fatal(err)
	}
	syncs := s.syncs() - syncsBefore
	s.t.Logf("%s: converged in %s: %s", step, at.Sub(start).Round(time.Millisecond), members)
	floor, starts := Floor(s.env.Kubelet, s.c, start, at)
	peak := s.checkSyncRate(step, start, at)
	s.waitWrites(writesAround)
	acked, lost := s.verifyWrites(step)
	refused, err := Refused(s.env.Hook.LogPath, s.c, start, at)
	if err != nil {
		s.t.Fatal(err)
	}
	return Figure{Scenario: step, Wall: at.Sub(start), Floor: floor, Refused: refused, Starts: starts, Acked: acked, Lost: lost, Syncs: syncs, PeakSyncs: peak}
}

// checkSyncRate fails the step on a sync loop between from and to.
func (s *scenario) checkSyncRate(step string, from, to time.Time) int {
	s.t.Helper()
	peak, at := PeakPerSecond(s.env.MC.Records(ns, exampleName), from, to)
	if peak > MaxSyncsPerSecond {
		s.t.Errorf("%s: %d hook calls in the second from %s, want at most %d: a sync loop (the hook's answers keep changing the parent)",
			step, peak, at.Format("15:04:05.000"), MaxSyncsPerSecond)
	}
	return peak
}

// verifyWrites stops the writer and asserts that no acknowledged put is lost.
func (s *scenario) verifyWrites(step string) (acked, lost int) {
	s.t.Helper()
	res, err := s.w.Verify(s.env.Ctx(), s.c.MemberURLs())
	if err != nil {
		s.t.Fatalf("%s: %v", step, err)
	}
	s.t.Logf("%s: writer: %d puts, %d acknowledged, %d lost, %d applied without acknowledgement",
		step, res.Attempts, res.Acked, res.Lost, res.AppliedUnacked)
	if res.Lost != 0 {
		s.t.Errorf("%s: %d of %d acknowledged puts lost, e.g. %v", step, res.Lost, res.Acked, res.LostKeys)
	}
	s.checkHistory(true)
	return res.Acked, res.Lost
}

func (s *scenario) patchSize(size int) {
	s.t.Helper()
	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"size": size}); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scenario) members() map[string]string {
	s.t.Helper()
	ms, err := s.c.Members(s.env.Ctx())
	if err != nil {
		s.t.Fatal(err)
	}
	return MemberIDs(ms)
}

func (s *scenario) leader() string {
	s.t.Helper()
	var name string
	err := s.env.WaitFor(10*time.Second, "a leader", func() (bool, string) {
		var err error
		name, err = s.c.Leader(s.env.Ctx())
		return err == nil, fmt.Sprint(err)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return name
}

// killEtcd kill -9s the member's etcd and waits until the kubelet has
// restarted it in the same Pod. Converged alone could be checked before the
// kubelet even saw the exit; the restart must have happened first.
func (s *scenario) killEtcd(victim string, before Pod) {
	s.t.Helper()
	if err := s.env.Kubelet.KillContainer(ns, victim, "etcd"); err != nil {
		s.t.Fatal(err)
	}
	if err := s.env.WaitFor(convergeTimeout, victim+" restarted", func() (bool, string) {
		p := podByName(s.c.Pods(), victim)
		return p.Restarts == before.Restarts+1 && p.UID == before.UID, fmt.Sprintf("%+v", p)
	}); err != nil {
		s.t.Fatal(err)
	}
}

// seeded returns a scenario with the seed example converged at 3 members.
func seeded(t *testing.T) *scenario {
	t.Helper()
	s := newScenario(t, currentVersion)
	s.create("setup", currentVersion, 3)
	return s
}

// Scenario 1: the seed example converges, on each etcd minor the hook supports.
func TestSeedExampleConverges(t *testing.T) {
	for _, version := range []string{currentVersion, etcdtest.Version35} {
		t.Run("v"+version, func(t *testing.T) {
			if version != currentVersion {
				longTail(t, "every pinned line bootstraps in TestEveryLineTakesTheRenderedCommand")
			}
			s := newScenario(t, version)
			Report(t, s.create("seed example, size 3, v"+version, version, 3))
			_, st, _ := s.c.Parent()
			if status, reason := st.Condition("Progressing"); status != "False" || reason != "Converged" {
				t.Errorf("Progressing = %s/%s, want False/Converged", status, reason)
			}
			got := make([]string, 0, 3)
			for _, p := range s.c.Pods() {
				url := s.c.MemberURL(p.Name)
				v, err := etcdServerVersion(s.env.Ctx(), url)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, v)
			}
			if d := cmp.Diff([]string{version, version, version}, got); d != "" {
				t.Errorf("etcd server versions (-want +got):\n%s", d)
			}
		})
	}
}

// Scenario 1b: a cluster of 5 from nothing, one member at a time.
func TestCreateFive(t *testing.T) {
	longTail(t, "bootstrap is TestSeedExampleConverges, growth to five TestScale")
	s := newScenario(t, currentVersion)
	Report(t, s.create("create, size 5, v"+currentVersion, currentVersion, 5))
	if got := len(s.members()); got != 5 {
		t.Errorf("etcd lists %d members, want 5", got)
	}
}

// Scenario 2: scale 3 → 5 → 3 → 1 → 3, one step converged before the next.
func TestScale(t *testing.T) {
	s := seeded(t)
	s.checkHealth("converged", 30*time.Second, healthHealthy, conditionIs("Ready", "True", ""))
	from := 3
	for _, to := range []int{5, 3, 1, 3} {
		step := fmt.Sprintf("scale %d→%d", from, to)
		s.startWriter(fmt.Sprintf("scale-%d-%d", from, to))
		s.waitWrites(writesAround)
		start, syncs := time.Now(), s.syncs()
		s.patchSize(to)
		if to == 5 {
			s.checkHealth("scaling", convergeTimeout, healthProgressing, conditionIs("Reconciling", "True", ""))
		}
		Report(t, s.converge(step, start, syncs, to))
		if to == 5 {
			s.checkSeries(step, map[string]float64{
				"etcd_cluster_desired_members": 5, "etcd_cluster_ready_members": 5, "etcd_cluster_voting_members": 5,
				"etcd_cluster_learners": 0, "etcd_cluster_quorum": 1, "etcd_cluster_has_leader": 1, "etcd_cluster_ready": 1,
			})
		}
		if t.Failed() {
			return
		}
		from = to
	}
}

// Scenario 3: a member's Pod is deleted; its data was on an emptyDir, so the
// member is gone for good and must be replaced by a new one.
func TestDeletedPodIsReplaced(t *testing.T) {
	longTail(t, "a dead member's replacement is TestNoClientReachesALearner's")
	s := seeded(t)
	const step = "delete the leader's Pod"
	s.startWriter("delete-pod")
	s.waitWrites(writesAround)
	before := s.members()
	victim := s.leader()
	start, syncs := time.Now(), s.syncs()
	if err := s.env.DeletePod(ns, victim); err != nil {
		t.Fatal(err)
	}
	fig := s.converge(step, start, syncs, 3)
	Report(t, fig)

	after := s.members()
	if _, ok := after[victim]; ok {
		t.Errorf("the deleted member %s is still in etcd's list: %v", victim, after)
	}
	for name, id := range after {
		if id == before[victim] {
			t.Errorf("member %s has the deleted member's ID %s", name, id)
		}
	}
	var kept, added []string
	for name := range after {
		if _, ok := before[name]; ok {
			kept = append(kept, name)
		} else {
			added = append(added, name)
		}
	}
	var wantKept []string
	for name := range before {
		if name != victim {
			wantKept = append(wantKept, name)
		}
	}
	if d := cmp.Diff(sorted(wantKept), sorted(kept)); d != "" {
		t.Errorf("surviving members (-want +got):\n%s", d)
	}
	if len(added) != 1 {
		t.Errorf("new members %v, want exactly one replacement", added)
	}
}

// Scenario 4: kill -9 of the leader's etcd. The kubelet restarts it on the
// same emptyDir, it rejoins as the same member, and the hook must not touch
// the membership: a restart is not a dead member.
func TestKilledMemberRestartsWithoutMembershipChange(t *testing.T) {
	s := seeded(t)
	const step = "kill -9 the leader's etcd"
	s.startWriter("kill")
	s.waitWrites(writesAround)
	before := s.members()
	victim := s.leader()
	pod := podByName(s.c.Pods(), victim)
	pid, err := s.env.Kubelet.ContainerPID(ns, victim, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	actionsBefore, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	loggedBefore, err := LoggedActions(s.env.Hook.LogPath, s.c)
	if err != nil {
		t.Fatal(err)
	}

	start, syncs := time.Now(), s.syncs()
	s.killEtcd(victim, pod)
	fig := s.converge(step, start, syncs, 3)
	Report(t, fig)

	if newPID, err := s.env.Kubelet.ContainerPID(ns, victim, "etcd"); err != nil || newPID == pid {
		t.Errorf("etcd of %s: pid %d after the kill (%v), was %d", victim, newPID, err, pid)
	}
	if d := cmp.Diff(before, s.members()); d != "" {
		t.Errorf("member names and IDs changed across a kill -9 (-before +after):\n%s", d)
	}
	actionsAfter, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(membershipChanges(actionsBefore), membershipChanges(actionsAfter)); d != "" {
		t.Errorf("etcd_hook_membership_actions_total moved across a kill -9 (-before +after):\n%s", d)
	}
	loggedAfter, err := LoggedActions(s.env.Hook.LogPath, s.c)
	if err != nil {
		t.Fatal(err)
	}
	if extra := loggedAfter[len(loggedBefore):]; len(extra) != 0 {
		t.Errorf("the hook changed the membership after the kill: %+v", extra)
	}
	// etcd says itself whether it came back on its data: "restarting local
	// member" from the WAL, against "starting local member" on an empty dir.
	log, err := os.ReadFile(s.env.Kubelet.ContainerLog(ns, victim, "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	runs := strings.Split(string(log), testenv.LogMarker)
	if last := runs[len(runs)-1]; !strings.Contains(last, "restarting local member") {
		t.Errorf("the restarted etcd of %s did not restart from its data; its log:\n%s", victim, tail(last, 2000))
	}
}

func podByName(pods []Pod, name string) Pod {
	for _, p := range pods {
		if p.Name == name {
			return p
		}
	}
	return Pod{}
}

// membershipChanges keeps the counters of actions that change membership,
// whatever their result: even a refused attempt is an attempt too many.
func membershipChanges(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if strings.HasPrefix(k, "add/") || strings.HasPrefix(k, "promote/") || strings.HasPrefix(k, "remove/") {
			out[k] = v
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// Scenario 5: the hook dies in the middle of a scale-out, right after a
// MemberAdd whose answer Metacontroller never saw, and again while the next
// member is a learner. Being stateless, the restarted hook must finish the
// job from what etcd says, without a stray or duplicate member.
func TestHookRestartDuringScaleOut(t *testing.T) {
	s := seeded(t)
	const step = "scale 3→5, hook killed twice"
	s.startWriter("hook-restart")
	s.waitWrites(writesAround)
	ctx := s.env.Ctx()
	parent := ns + "/" + exampleName

	// Every sync reaches the hook, which acts, and no answer comes back:
	// the Pod of the member just added is never created.
	removeFault := s.env.Proxy.Inject(harness.Fault{Path: "/sync", Parent: parent, DropResponse: true})
	start, syncs := time.Now(), s.syncs()
	s.patchSize(5)
	var pending string
	if err := s.env.WaitFor(30*time.Second, "an added member without a Pod", func() (bool, string) {
		ms, err := s.c.Members(ctx)
		if err != nil {
			return false, err.Error()
		}
		pending = DescribeMembers(ms)
		return len(ms) == 4 && HasPendingMember(ms), pending
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.env.Hook.Kill(); err != nil {
		t.Fatal(err)
	}
	removeFault()
	t.Logf("hook killed after MemberAdd, %d answers dropped; members %s; pods %v",
		s.env.Proxy.DroppedResponses.Load(), pending, s.c.PodNames())
	if n := len(s.c.Pods()); n != 3 {
		t.Fatalf("%d pods while every answer was dropped, want 3", n)
	}
	// Metacontroller keeps retrying into a dead port meanwhile.
	s.waitHookErrorsAfter(time.Now(), 1)
	if err := s.env.Hook.Restart(ctx); err != nil {
		t.Fatal(err)
	}

	// Second kill: as soon as the fifth member is in etcd's list.
	if err := s.env.WaitFor(convergeTimeout, "the fifth member added", func() (bool, string) {
		ms, err := s.c.Members(ctx)
		if err != nil {
			return false, err.Error()
		}
		pending = DescribeMembers(ms)
		return len(ms) == 5 && HasPendingMember(ms), pending
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.env.Hook.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("hook killed again; members %s; pods %v", pending, s.c.PodNames())
	s.waitHookErrorsAfter(time.Now(), 1)
	if err := s.env.Hook.Restart(ctx); err != nil {
		t.Fatal(err)
	}

	Report(t, s.converge(step, start, syncs, 5))
	logged, err := LoggedActions(s.env.Hook.LogPath, s.c)
	if err != nil {
		t.Fatal(err)
	}
	var during []LoggedAction
	for _, a := range logged {
		if ts, err := time.Parse(time.RFC3339Nano, a.Time); err == nil && !ts.Before(start) {
			during = append(during, a)
		}
	}
	t.Logf("membership changes during the scale-out: %+v", during)
	if d := cmp.Diff(map[string]int{"add": 2, "promote": 2}, CountActions(during)); d != "" {
		t.Errorf("membership changes for 3→5 across hook restarts (-want +got):\n%s", d)
	}
}

// waitHookErrorsAfter waits for n failed hook calls that started after t0.
func (s *scenario) waitHookErrorsAfter(t0 time.Time, n int) {
	s.t.Helper()
	err := s.env.WaitFor(10*time.Second, "failed hook calls", func() (bool, string) {
		got := 0
		for _, r := range s.env.MC.Records(ns, exampleName) {
			if r.Start.After(t0) && r.Err != nil {
				got++
			}
		}
		return got >= n, fmt.Sprint(got, " failed calls")
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// Scenario 6: deleting the EtcdCluster runs the finalize hook to its end and
// leaves no etcd process behind.
func TestDeleteCluster(t *testing.T) {
	s := seeded(t)
	const step = "delete the EtcdCluster"
	// What was written must have been readable up to the deletion; after
	// it there is nothing left to read.
	s.startWriter("delete")
	s.waitWrites(writesAround)
	acked, lost := s.verifyWrites(step)

	var pids []int
	for _, p := range s.c.Pods() {
		pid, err := s.env.Kubelet.ContainerPID(ns, p.Name, "etcd")
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	s.checkSeries(step+" (before)", map[string]float64{"etcd_cluster_ready_members": 3})
	start, syncs := time.Now(), s.syncs()
	if err := s.env.DeleteParentAndWait(ns, exampleName, convergeTimeout); err != nil {
		t.Fatal(err)
	}
	// The finalize answer that said finalized took the cluster's series
	// with it, before the parent went.
	if left, err := clusterSeries(s.env.Hook.URL(), ns, exampleName); err != nil || len(left) > 0 {
		t.Errorf("%s: the hook still serves %d series of the deleted cluster (%v): %v", step, len(left), err, left)
	}
	var etcds []string
	if err := s.env.WaitFor(30*time.Second, "no etcd process", func() (bool, string) {
		etcds = etcds[:0]
		for _, p := range s.env.Procs.Live() {
			if p.Name != "etcd-hook" {
				etcds = append(etcds, fmt.Sprintf("%s (pid %d)", p.Name, p.Pid))
			}
		}
		return len(etcds) == 0, strings.Join(etcds, ", ")
	}); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	peak := s.checkSyncRate(step, start, end)
	Report(t, Figure{Scenario: step, Wall: end.Sub(start), Acked: acked, Lost: lost, Syncs: s.syncs() - syncs, PeakSyncs: peak})

	for _, p := range s.env.Procs.Live() {
		if slices.Contains(pids, p.Pid) {
			t.Errorf("etcd pid %d is still tracked", p.Pid)
		}
	}
	// Past the harness' own table: the kernel's. A pid reused since would
	// run something else, so the command line decides.
	for _, pid := range pids {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmd), "etcd-v") {
			t.Errorf("etcd pid %d still runs: %s", pid, strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	for _, typ := range []string{harness.TypePod, harness.TypeService, harness.TypePVC, harness.TypePDB, harness.TypeNetPolicy, harness.TypeSecret} {
		if left := s.env.API.List(typ, ns); len(left) != 0 {
			t.Errorf("%d %s left after the parent is gone", len(left), typ)
		}
	}
	var finalized bool
	for _, r := range s.env.MC.Records(ns, exampleName) {
		if r.Finalizing && r.HTTPStatus == 200 {
			finalized = r.Finalized
		}
	}
	if !finalized {
		t.Error("the last finalize answer did not say finalized: true")
	}
	if n := len(s.c.Pods()); n != 0 {
		t.Errorf("%d pods left", n)
	}
}
