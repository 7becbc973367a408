package e2e

import (
	"fmt"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// The version scenarios run the newest pair of pinned lines, 3.6 → 3.7
// and, through etcd's downgrade protocol, 3.7 → 3.6; TestUpgradeWithKilledMember
// (long tail) keeps the 3.5 → 3.6 path, and TestTLS upgrades 3.6 → 3.7 over
// TLS.
const (
	oldVersion = etcdtest.Version36
	newVersion = etcdtest.Version37
	// unavailableVersion has no binary: its image cannot be pulled.
	unavailableVersion = "3.7.99"
	// skippedFromVersion is two minors below newVersion: the change skips
	// the one between.
	skippedFromVersion = etcdtest.Version35
	// refusalHold is how long a refused or halted change is watched for
	// anything moving: several resyncs of the hook.
	refusalHold = 4 * time.Second
)

// upgradeScenario is a scenario whose etcd binaries for every version it
// runs are checked first.
func upgradeScenario(t *testing.T, versions ...string) *scenario {
	t.Helper()
	for _, v := range versions[1:] {
		testenv.Binary(t, testenv.Etcd(v))
	}
	return newScenario(t, versions[0])
}

// Scenario U1: a rolling upgrade of three members, one minor version up.
// The leader goes last, after leadership moved away, and nothing changes
// in the membership. (The way back is TestDowngradeRolling.)
func TestUpgradeRolling(t *testing.T) {
	s := upgradeScenario(t, oldVersion, newVersion)
	s.create("setup", oldVersion, 3)
	step := fmt.Sprintf("upgrade %s→%s, 3 members", oldVersion, newVersion)
	s.startWriter("upgrade")
	s.waitWrites(writesAround)
	before := s.members()
	leader := s.leader()
	actionsBefore, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	watch := WatchRollout(s.env.Ctx(), s.c)
	start, syncs := time.Now(), s.syncs()
	s.patchVersion(newVersion)
	s.checkHealth("upgrading", convergeTimeout, healthProgressing, conditionIs("Upgrading", "True", "RollingUpgrade"))
	Report(t, s.upgrade(step, newVersion, start, syncs, 3))
	changes, leaders, conditions := watch.Stop()
	logRollout(t, changes, leaders, conditions)

	if d := cmp.Diff(before, s.members()); d != "" {
		t.Errorf("member names and IDs changed across the upgrade (-before +after):\n%s", d)
	}
	actionsAfter, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	checkOnlyLeaderMoved(t, actionDelta(actionsBefore, actionsAfter))
	checkRolloutOrder(t, changes, leader, 3)
	checkStoppedAsFollowers(t, s, changes, "", nil)
	checkConditionsNamed(t, conditions, changes, "upgrading")
}

// Scenario U2: five members upgraded while the leader's etcd is killed
// (kill -9) halfway through, before its own turn.
func TestUpgradeWithKilledMember(t *testing.T) {
	longTail(t, "the health-gated rolling upgrade is TestUpgradeRolling, its halt TestUpgradeUnavailableVersionHaltsAndReverts")
	// The 3.5 → 3.6 path, which the other scenarios no longer take.
	const oldVersion, newVersion = etcdtest.Version35, etcdtest.Version36
	s := upgradeScenario(t, oldVersion, newVersion)
	s.create("setup", oldVersion, 5)
	step := fmt.Sprintf("upgrade %s→%s, 5 members, leader killed halfway", oldVersion, newVersion)
	s.startWriter("upgrade-kill")
	s.waitWrites(writesAround)
	before := s.members()
	actionsBefore, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	watch := WatchRollout(s.env.Ctx(), s.c)
	start, syncs := time.Now(), s.syncs()
	s.patchVersion(newVersion)

	// Halfway: two members run the new version and are ready again.
	if err := s.env.WaitFor(convergeTimeout, "two members upgraded", func() (bool, string) {
		upgraded := 0
		for _, img := range s.c.PodImages() {
			if img.Running == etcdImage(newVersion) && img.Ready {
				upgraded++
			}
		}
		return upgraded >= 2, fmt.Sprint(upgraded, " upgraded")
	}); err != nil {
		t.Fatal(err)
	}
	victim := s.leader()
	t.Logf("killing the leader %s (image %s) halfway", victim, s.c.PodImages()[victim].Spec)
	killedAt := time.Now()
	if err := s.env.Kubelet.KillContainer(ns, victim, "etcd"); err != nil {
		t.Fatal(err)
	}
	Report(t, s.upgrade(step, newVersion, start, syncs, 5))
	changes, leaders, conditions := watch.Stop()
	logRollout(t, changes, leaders, conditions)

	if d := cmp.Diff(before, s.members()); d != "" {
		t.Errorf("member names and IDs changed across the upgrade (-before +after):\n%s", d)
	}
	actionsAfter, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(membershipChanges(actionsBefore), membershipChanges(actionsAfter)); d != "" {
		t.Errorf("membership changed during the upgrade (-before +after):\n%s", d)
	}
	checkOneChangePerPod(t, changes, 5)
	checkStoppedAsFollowers(t, s, changes, victim, nil)
	for _, c := range changes {
		if c.Pod == victim && c.At.Before(killedAt) {
			t.Errorf("%s: the leader's image was changed before it was killed", c)
		}
	}
}

// Scenario U3: a version whose image cannot be pulled. The first member
// changed halts the rollout, the cluster keeps serving on the others, and
// setting the previous version back repairs that member.
func TestUpgradeUnavailableVersionHaltsAndReverts(t *testing.T) {
	s := upgradeScenario(t, oldVersion)
	s.create("setup", oldVersion, 3)
	s.startWriter("upgrade-unavailable")
	s.waitWrites(writesAround)
	before := s.members()
	leader := s.leader()
	imagesBefore := s.c.SpecImages()
	s.patchVersion(unavailableVersion)

	halted := s.waitCondition(convergeTimeout, "Upgrading", "UpgradeHalted on ImagePullBackOff", func(c UpgradeCondition) bool {
		return c.Status == "True" && c.Reason == "UpgradeHalted" && strings.Contains(c.Message, "ImagePullBackOff")
	})
	t.Logf("halted: %s", halted)
	s.checkHealth("upgrade-halted", 30*time.Second, healthDegraded, conditionIs("Stalled", "True", "UpgradeHalted"))
	var broken []string
	for name, img := range s.c.PodImages() {
		if img.Spec == etcdImage(unavailableVersion) {
			broken = append(broken, name)
		}
	}
	if len(broken) != 1 {
		t.Fatalf("Pods on %s: %v, want exactly one", unavailableVersion, broken)
	}
	if broken[0] == leader {
		t.Errorf("the leader %s was the first member changed", leader)
	}
	checkStoppedAsFollowers(t, s, []ImageChange{{Pod: broken[0]}}, "", nil)
	if !strings.Contains(halted.Message, "member "+broken[0]+" ") {
		t.Errorf("Upgrading message %q does not name the member %s", halted.Message, broken[0])
	}

	// Held: the others keep their image, a quorum serves writes, and the
	// halt is still reported.
	holdStart := time.Now()
	s.waitWrites(writesAround)
	if rest := refusalHold - time.Since(holdStart); rest > 0 {
		time.Sleep(rest)
	}
	wantImages := maps.Clone(imagesBefore)
	wantImages[broken[0]] = etcdImage(unavailableVersion)
	if d := cmp.Diff(wantImages, s.c.SpecImages()); d != "" {
		t.Errorf("Pod images while halted (-want +got):\n%s", d)
	}
	st, _ := s.c.VersionStatus()
	if up := st.Conditions["Upgrading"]; up.Reason != "UpgradeHalted" {
		t.Errorf("Upgrading after %s halted: %s, want UpgradeHalted", refusalHold, up)
	}
	if av := st.Conditions["Available"]; av.Status != "True" {
		t.Errorf("Available while halted: %s, want True", av)
	}
	if st.CurrentVersion != oldVersion || st.TargetVersion != unavailableVersion {
		t.Errorf("versions while halted: current %q target %q, want %q and %q", st.CurrentVersion, st.TargetVersion, oldVersion, unavailableVersion)
	}

	step := fmt.Sprintf("revert %s→%s, 1 of 3 members in ImagePullBackOff", unavailableVersion, oldVersion)
	start, syncs := time.Now(), s.syncs()
	s.patchVersion(oldVersion)
	Report(t, s.upgrade(step, oldVersion, start, syncs, 3))
	if d := cmp.Diff(before, s.members()); d != "" {
		t.Errorf("member names and IDs changed (-before +after):\n%s", d)
	}
}

// Scenario U3b: a single member has nobody to hand leadership to, so its
// upgrade is an outage. When its image cannot be pulled no etcd is left to
// read the membership from, and setting the previous version back must
// still repair it. Then the real upgrade goes through.
func TestUpgradeSingleMember(t *testing.T) {
	longTail(t, "the rolling upgrade is TestUpgradeRolling")
	s := upgradeScenario(t, oldVersion, newVersion)
	s.create("setup", oldVersion, 1)
	s.startWriter("single-unavailable")
	s.waitWrites(writesAround)
	before := s.members()
	s.patchVersion(unavailableVersion)
	halted := s.waitCondition(convergeTimeout, "Upgrading", "UpgradeHalted on ImagePullBackOff", func(c UpgradeCondition) bool {
		return c.Status == "True" && c.Reason == "UpgradeHalted" && strings.Contains(c.Message, "ImagePullBackOff")
	})
	t.Logf("halted: %s", halted)

	revert := fmt.Sprintf("revert %s→%s, single member in ImagePullBackOff", unavailableVersion, oldVersion)
	start, syncs := time.Now(), s.syncs()
	s.patchVersion(oldVersion)
	Report(t, s.upgrade(revert, oldVersion, start, syncs, 1))

	step := fmt.Sprintf("upgrade %s→%s, single member (an outage)", oldVersion, newVersion)
	s.startWriter("single-upgrade")
	s.waitWrites(writesAround)
	start, syncs = time.Now(), s.syncs()
	s.patchVersion(newVersion)
	Report(t, s.upgrade(step, newVersion, start, syncs, 1))
	if d := cmp.Diff(before, s.members()); d != "" {
		t.Errorf("member name and ID changed (-before +after):\n%s", d)
	}
}

// Scenario U4: a change that skips a minor version is refused and changes
// nothing.
func TestUpgradeSkippingMinorRefused(t *testing.T) {
	s := upgradeScenario(t, skippedFromVersion, newVersion)
	s.create("setup", skippedFromVersion, 3)
	checkRefused(t, s, skippedFromVersion, newVersion, "skips a minor version from "+skippedFromVersion,
		fmt.Sprintf("refuse %s→%s (skips %s)", skippedFromVersion, newVersion, lineOf(oldVersion)))
}

// lineOf is "3.6" for "3.6.16".
func lineOf(version string) string {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return version
	}
	return parts[0] + "." + parts[1]
}

// checkRefused asks for a change from running to target that etcd's skew
// rules forbid, and checks that it is refused by name, that nothing moves,
// and that setting running back clears the refusal.
func checkRefused(t *testing.T, s *scenario, running, target, rule, step string) {
	t.Helper()
	s.startWriter("refused-" + target)
	s.waitWrites(writesAround)
	before := s.members()
	images := s.c.SpecImages()
	pods := s.c.Pods()
	actionsBefore, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	start, syncs := time.Now(), s.syncs()
	s.patchVersion(target)
	up := s.waitCondition(convergeTimeout, "Upgrading", "VersionSkewRefused", func(c UpgradeCondition) bool {
		return c.Reason == "VersionSkewRefused"
	})
	refusedAt := time.Now()
	if up.Status != "False" || !strings.Contains(up.Message, rule) {
		t.Errorf("Upgrading = %s, want False/VersionSkewRefused naming %q", up, rule)
	}
	s.checkHealth("version-skew-refused", 30*time.Second, healthDegraded, conditionIs("Stalled", "True", "VersionSkewRefused"))
	time.Sleep(refusalHold)
	st, _ := s.c.VersionStatus()
	if dg := st.Conditions["Degraded"]; dg.Status != "True" || dg.Reason != "VersionSkewRefused" || !strings.Contains(dg.Message, rule) {
		t.Errorf("Degraded = %s, want True/VersionSkewRefused naming %q", dg, rule)
	}
	if st.CurrentVersion != running || st.TargetVersion != target {
		t.Errorf("versions: current %q target %q, want %q and %q", st.CurrentVersion, st.TargetVersion, running, target)
	}
	if d := cmp.Diff(images, s.c.SpecImages()); d != "" {
		t.Errorf("Pod images after the refusal (-before +after):\n%s", d)
	}
	if d := cmp.Diff(pods, s.c.Pods()); d != "" {
		t.Errorf("Pods after the refusal (-before +after):\n%s", d)
	}
	if d := cmp.Diff(before, s.members()); d != "" {
		t.Errorf("member names and IDs after the refusal (-before +after):\n%s", d)
	}
	actionsAfter, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]float64{}, actionDelta(actionsBefore, actionsAfter)); d != "" {
		t.Errorf("membership actions after the refusal (-want +got):\n%s", d)
	}
	versions, err := s.c.MemberVersions(s.env.Ctx())
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range versions {
		if v != running {
			t.Errorf("etcd of %s reports %s after the refusal, want %s", name, v, running)
		}
	}
	s.waitWrites(writesAround)
	acked, lost := s.verifyWrites(step)
	Report(t, Figure{Scenario: step, Wall: refusedAt.Sub(start), Acked: acked, Lost: lost,
		Syncs: s.syncs() - syncs, PeakSyncs: s.checkSyncRate(step, start, time.Now())})

	// Setting the running version back is how the user leaves the refusal.
	s.patchVersion(running)
	if err := s.env.WaitFor(convergeTimeout, "the refusal cleared", func() (bool, string) {
		st, _ := s.c.VersionStatus()
		dg := st.Conditions["Degraded"]
		if dg.Status != "False" {
			return false, "Degraded " + dg.String()
		}
		return s.c.Upgraded(s.env.Ctx(), running, len(before))
	}); err != nil {
		t.Error(err)
	}
}

// patchVersion sets spec.version, as kubectl patch would.
func (s *scenario) patchVersion(version string) {
	s.t.Helper()
	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"version": version}); err != nil {
		s.t.Fatal(err)
	}
}

// upgrade waits for the change to version made at start (when syncsBefore
// syncs had been made) to finish, checks the writer and returns the
// figure. The floor is the member restarts of the window, summed: the
// hook restarts one member at a time by design.
func (s *scenario) upgrade(step, version string, start time.Time, syncsBefore, size int) Figure {
	s.t.Helper()
	var at time.Time
	err := s.env.WaitFor(2*convergeTimeout, fmt.Sprintf("%d members upgraded to %s", size, version), func() (bool, string) {
		ok, why := s.c.Upgraded(s.env.Ctx(), version, size)
		if ok {
			at = time.Now()
		}
		return ok, why
	})
	if err != nil {
		s.t.Fatal(err)
	}
	syncs := s.syncs() - syncsBefore
	s.t.Logf("%s: done in %s", step, at.Sub(start).Round(time.Millisecond))
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

// waitCondition waits for the parent's condition typ to satisfy ok and
// returns it.
func (s *scenario) waitCondition(timeout time.Duration, typ, what string, ok func(UpgradeCondition) bool) UpgradeCondition {
	s.t.Helper()
	var got UpgradeCondition
	err := s.env.WaitFor(timeout, typ+" "+what, func() (bool, string) {
		st, found := s.c.VersionStatus()
		if !found {
			return false, "parent is gone"
		}
		got = st.Conditions[typ]
		return st.ObservedGeneration == st.Generation && ok(got), got.String()
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return got
}

func logRollout(t *testing.T, changes []ImageChange, leaders []string, conditions []UpgradeCondition) {
	t.Helper()
	for _, c := range changes {
		t.Logf("image change: %s", c)
	}
	t.Logf("leaders in turn: %v", leaders)
	for _, c := range conditions {
		t.Logf("Upgrading: %s", c)
	}
}

// checkOneChangePerPod: every member's image changed exactly once.
func checkOneChangePerPod(t *testing.T, changes []ImageChange, size int) {
	t.Helper()
	seen := map[string]int{}
	for _, c := range changes {
		seen[c.Pod]++
	}
	if len(seen) != size || len(changes) != size {
		t.Errorf("image changes %v: want one for each of %d members", changes, size)
	}
}

// checkRolloutOrder: one member at a time (each change finds the members
// changed before it ready on the new image), and the member that led when
// the upgrade began last.
func checkRolloutOrder(t *testing.T, changes []ImageChange, leaderBefore string, size int) {
	t.Helper()
	checkOneChangePerPod(t, changes, size)
	for i, c := range changes {
		for _, prev := range changes[:i] {
			if img := c.Pods[prev.Pod]; !img.Ready || img.Running != prev.To {
				t.Errorf("%s while %s, changed before, was not ready on its new image: %+v", c, prev.Pod, img)
			}
		}
	}
	if n := len(changes); n > 0 && changes[n-1].Pod != leaderBefore {
		t.Errorf("the last member upgraded is %s, want %s, the leader before the upgrade", changes[n-1].Pod, leaderBefore)
	}
}

// checkOnlyLeaderMoved: an upgrade changes no membership; it moves the
// leadership once, off the last member.
func checkOnlyLeaderMoved(t *testing.T, delta map[string]float64) {
	t.Helper()
	for action, n := range delta {
		if !strings.HasPrefix(action, "move-leader/") {
			t.Errorf("membership action %s counted %v times during the upgrade", action, n)
		}
	}
	if delta["move-leader/ok"] != 1 {
		t.Errorf("leadership moved %v times during the upgrade, want once: %v", delta["move-leader/ok"], delta)
	}
}

// checkStoppedAsFollowers asks etcd itself whether a member led when the
// kubelet stopped it for its new image: on SIGTERM etcd logs either that it
// skipped the leadership transfer because it does not lead, or (through
// MoveLeader, which the hook's own move also logs) that it starts one.
// Sampling the leader from outside could not tell a MoveLeader a few
// milliseconds before the image change from one a few milliseconds after.
// killed, if any, was killed -9 on the way and may not have been stopped
// gracefully at all. before holds what followerStops counted before the
// change began (nil: nothing).
func checkStoppedAsFollowers(t *testing.T, s *scenario, changes []ImageChange, killed string, before map[string]int) {
	t.Helper()
	for _, c := range changes {
		n := followerStops(t, s, c.Pod) - before[c.Pod]
		if n != 1 && !(c.Pod == killed && n == 0) {
			t.Errorf("etcd of %s stopped as a follower %d times, want once, for its new image (a leader hands over leadership on SIGTERM instead)", c.Pod, n)
		}
	}
}

// followerStops counts the times a member's etcd, stopped, said it did not
// lead, over every container the Pod ran.
func followerStops(t *testing.T, s *scenario, pod string) int {
	t.Helper()
	data, err := os.ReadFile(s.env.Kubelet.ContainerLog(ns, pod, "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), `"msg":"skipped leadership transfer; local server is not leader"`)
}

// checkConditionsNamed: while a member's image changed, the Upgrading
// condition named it ("upgrading member X", or "downgrading").
func checkConditionsNamed(t *testing.T, conditions []UpgradeCondition, changes []ImageChange, verb string) {
	t.Helper()
	for _, c := range changes {
		found := false
		for _, cond := range conditions {
			if cond.Status == "True" && strings.Contains(cond.Message, verb+" member "+c.Pod) {
				found = true
			}
		}
		if !found {
			t.Errorf("no Upgrading condition named %s while it was upgraded", c.Pod)
		}
	}
}
