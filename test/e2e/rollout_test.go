package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// Rolling spec changes: a label reaches running members in
// place, and a change of resources rolls one member at a time, on claims
// (the same members in new Pods) and on emptyDir (new members through
// learners), with the writer running and the cluster sampled throughout.

const (
	// rolloutLabel is the label the scenarios add to spec.pod.labels.
	rolloutLabel, rolloutLabelValue = "rollout.example.com/tier", "in-place"
	// rolloutTimeout bounds one rolling change: an emptyDir member's
	// replacement waits out etcd's 5 s reconfiguration guard.
	rolloutTimeout = 3 * convergeTimeout
)

// Scenario R1: a cluster of 3 on PVCs. A label is added in place, then
// the resources change: each Pod is replaced on its claim, one at a time,
// the leader's last, and the members stay the same. With BENCH_REPORT set
// (make bench), the cluster then grows to 5 and rolls again.
func TestRolloutSpecChangeWithPVCs(t *testing.T) {
	testRollout(t, true)
}

// Scenario R2: the same on emptyDir. Each member is replaced by a new one
// that joins as a learner, is promoted, and then the outdated member is
// removed.
func TestRolloutSpecChangeOnEmptyDir(t *testing.T) {
	longTail(t, "the emptyDir rollout is TestNoClientReachesALearner's, the PVC one TestRolloutSpecChangeWithPVCs")
	testRollout(t, false)
}

func testRollout(t *testing.T, claims bool) {
	s := newFaultScenario(t, harness.Options{})
	flavour, spec := "emptyDir", map[string]any{"size": 3, "version": faultVersion}
	if claims {
		flavour = "PVCs"
		spec["pod"] = map[string]any{"persistentVolumeClaimSpec": map[string]any{
			"accessModes": []any{"ReadWriteOnce"},
			"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
		}}
	}
	s.createSpec("setup ("+flavour+")", spec)
	s.labelInPlace(flavour, 3)
	if t.Failed() {
		return
	}
	s.rollResources(flavour, 3, claims, map[string]string{"cpu": "100m", "memory": "64Mi"})
	if t.Failed() || os.Getenv("BENCH_REPORT") == "" {
		return
	}
	step := fmt.Sprintf("scale 3→5 (%s)", flavour)
	s.startWriter("scale-" + flavour)
	s.waitWrites(writesAround)
	start, syncs := time.Now(), s.syncs()
	s.patchSize(5)
	Report(t, s.converge(step, start, syncs, 5))
	if t.Failed() {
		return
	}
	s.rollResources(flavour, 5, claims, map[string]string{"cpu": "200m", "memory": "64Mi"})
}

// labelInPlace adds a label to spec.pod.labels and checks that it reaches
// every Pod without a restart: the same Pods (UIDs), no container started,
// no restart counted, the same spec hash and members, no membership step.
func (s *scenario) labelInPlace(flavour string, size int) {
	s.t.Helper()
	step := fmt.Sprintf("label added in place, %d members (%s)", size, flavour)
	s.startWriter("label-" + flavour)
	s.waitWrites(writesAround)
	before := s.c.MemberPods()
	members := s.members()
	hash := s.oneHash()
	logged := len(s.loggedActions())

	start, syncs := time.Now(), s.syncs()
	s.editPod(func(pod map[string]any) {
		labels, _ := pod["labels"].(map[string]any)
		if labels == nil {
			labels = map[string]any{}
		}
		labels[rolloutLabel] = rolloutLabelValue
		pod["labels"] = labels
	})
	var at time.Time
	err := s.env.WaitFor(convergeTimeout, "the label on every Pod", func() (bool, string) {
		if ok, why := s.c.Converged(s.env.Ctx(), size); !ok {
			return false, why
		}
		for name, p := range s.c.MemberPods() {
			if p.Labels[rolloutLabel] != rolloutLabelValue {
				return false, fmt.Sprintf("pod %s has labels %v", name, p.Labels)
			}
		}
		at = time.Now()
		return true, ""
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("%s: on every Pod in %s", step, at.Sub(start).Round(time.Millisecond))
	// A restart the label caused would come within a sync or two.
	time.Sleep(settleFor)
	after := s.c.MemberPods()
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			s.t.Errorf("%s: Pod %s is gone", step, name)
		case a.UID != b.UID:
			s.t.Errorf("%s: Pod %s was replaced (UID %s → %s)", step, name, b.UID, a.UID)
		case a.Restarts != b.Restarts:
			s.t.Errorf("%s: Pod %s restarted (restartCount %d → %d)", step, name, b.Restarts, a.Restarts)
		case a.SpecHash != hash:
			s.t.Errorf("%s: Pod %s spec hash %q → %q: a label is no reason to roll", step, name, hash, a.SpecHash)
		case a.Labels[rolloutLabel] != rolloutLabelValue:
			s.t.Errorf("%s: Pod %s lost the label: %v", step, name, a.Labels)
		}
	}
	if len(after) != len(before) {
		s.t.Errorf("%s: Pods %v after, %v before", step, slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
	}
	if runs := s.clusterRuns(start); len(runs) != 0 {
		s.t.Errorf("%s: the kubelet started %d containers: %+v", step, len(runs), runs)
	}
	if d := cmp.Diff(members, s.members()); d != "" {
		s.t.Errorf("%s: members (name → ID) (-before +after):\n%s", step, d)
	}
	if changes := s.loggedActions()[logged:]; len(changes) != 0 {
		s.t.Errorf("%s: membership steps: %+v", step, changes)
	}
	peak := s.checkSyncRate(step, start, at)
	acked, lost := s.verifyWrites(step)
	reportRollout(s.t, RolloutFigure{Scenario: step, Wall: at.Sub(start), Acked: acked, Lost: lost, Syncs: s.syncs() - syncs, PeakSyncs: peak})
}

// rollResources sets spec.pod.resources.requests and waits for every
// member to be on the new spec, sampling the cluster all along; then it
// checks the rollout's order and safety for the flavour.
func (s *scenario) rollResources(flavour string, size int, claims bool, requests map[string]string) {
	s.t.Helper()
	step := fmt.Sprintf("rolling change of resources, %d members (%s)", size, flavour)
	s.startWriter(fmt.Sprintf("roll-%s-%d", flavour, size))
	s.waitWrites(writesAround)
	before := s.c.MemberPods()
	members := s.members()
	oldHash := s.oneHash()
	leader := s.leader()
	logged := len(s.loggedActions())
	actionsBefore, err := HookActions(s.env.Hook.URL())
	if err != nil {
		s.t.Fatal(err)
	}
	stops := map[string]int{}
	for name := range before {
		stops[name] = s.followerStops(name)
	}
	claimUIDs := s.claimUIDs()

	watch := WatchSpecRollout(s.env.Ctx(), s.c)
	start, syncs := time.Now(), s.syncs()
	s.editPod(func(pod map[string]any) {
		req := map[string]any{}
		for k, v := range requests {
			req[k] = v
		}
		pod["resources"] = map[string]any{"requests": req}
	})
	if claims && size == 3 && os.Getenv("BENCH_REPORT") == "" {
		// The GitOps tools' view mid-roll (left out of the benchmark, whose
		// wall time it would lengthen).
		s.checkHealth("rolling", rolloutTimeout, healthProgressing, conditionIs("Reconciling", "True", "RollingChange"))
	}
	var at time.Time
	err = s.env.WaitFor(rolloutTimeout, fmt.Sprintf("%d members on the new spec", size), func() (bool, string) {
		ok, why := s.c.rolledOut(s.env.Ctx(), size, oldHash, requests, map[string]string{rolloutLabel: rolloutLabelValue})
		if ok {
			at = time.Now()
		}
		return ok, why
	})
	samples := watch.Stop()
	if err != nil {
		for _, smp := range samples[max(0, len(samples)-20):] {
			s.t.Log(smp)
		}
		s.t.Fatal(err)
	}
	syncCount := s.syncs() - syncs
	stopTime, startTime, replaced, detail := s.restartFloor(start, at, claims)
	peak := s.checkSyncRate(step, start, at)
	refused, err := Refused(s.env.Hook.LogPath, s.c, start, at)
	if err != nil {
		s.t.Fatal(err)
	}
	s.waitWrites(writesAround)
	acked, lost := s.verifyWrites(step)
	reportRollout(s.t, RolloutFigure{Scenario: step, Wall: at.Sub(start), Floor: stopTime + startTime, Stops: stopTime, Starts: startTime,
		Replaced: replaced, Refused: refused, Acked: acked, Lost: lost, Syncs: syncCount, PeakSyncs: peak})
	s.t.Logf("%s: floor:\n%s", step, strings.Join(detail, "\n"))
	s.logTimeline(step, start, at, samples)
	if replaced != size {
		s.t.Errorf("%s: %d etcd processes started and served, want one for each of the %d members", step, replaced, size)
	}

	sum := summarize(samples)
	s.t.Logf("%s: %d samples (longest gap %s); fewest ready voters %d (answering etcd %d), at %s; most learners %d, most members %d",
		step, sum.Samples, sum.MaxGap.Round(time.Millisecond), sum.MinReadyVoters, sum.MinAnswering, sum.MinAt, sum.MaxLearners, sum.MaxMembers)
	if sum.MinReadyVoters < size-1 {
		s.t.Errorf("%s: %d ready voters at %s, want at least %d: two members were out at once", step, sum.MinReadyVoters, sum.MinAt, size-1)
	}
	if wall := at.Sub(start); sum.Samples < int(wall/(4*samplePause)) {
		s.t.Errorf("%s: %d samples in %s: the cluster was not watched continuously", step, sum.Samples, round(wall))
	}
	after := s.c.MemberPods()
	newActions := s.loggedActions()[logged:]
	for _, a := range newActions {
		s.t.Logf("%s: membership step %s %s", step, a.Time, a.Action)
	}
	if claims {
		s.checkClaimRollout(step, size, before, after, samples, leader)
		if d := cmp.Diff(members, s.members()); d != "" {
			s.t.Errorf("%s: members (name → ID) (-before +after):\n%s", step, d)
		}
		actionsAfter, err := HookActions(s.env.Hook.URL())
		if err != nil {
			s.t.Fatal(err)
		}
		if d := cmp.Diff(membershipChanges(actionsBefore), membershipChanges(actionsAfter)); d != "" {
			s.t.Errorf("%s: membership changed (-before +after):\n%s", step, d)
		}
		for name := range before {
			if n := s.followerStops(name) - stops[name]; n != 1 {
				s.t.Errorf("%s: etcd of %s stopped as a follower %d times, want once (a leader hands leadership over on SIGTERM instead)", step, name, n)
			}
			s.checkRestartedFromData(step, name)
		}
		if d := cmp.Diff(claimUIDs, s.claimUIDs()); d != "" {
			s.t.Errorf("%s: PVCs (name → UID) (-before +after):\n%s", step, d)
		}
	} else {
		s.checkLearnerRollout(step, size, members, newActions, sum, leader)
	}
}

// checkClaimRollout: every Pod replaced exactly once under its name, one
// at a time (each left while every other Pod served, after the previous
// one's new Pod served), the leader's last.
func (s *scenario) checkClaimRollout(step string, size int, before, after map[string]MemberPod, samples []RolloutSample, leader string) {
	s.t.Helper()
	reps, uids := podReplacements(before, samples)
	for _, r := range reps {
		s.t.Logf("%s: Pod replaced: %s", step, r)
	}
	for name, seen := range uids {
		if len(seen) != 2 {
			s.t.Errorf("%s: Pod %s had UIDs %v, want its UID to change exactly once", step, name, seen)
		}
		if a, ok := after[name]; !ok || a.UID == before[name].UID {
			s.t.Errorf("%s: Pod %s was not replaced (before %s, after %+v)", step, name, before[name].UID, a)
		}
	}
	if d := cmp.Diff(sorted(slices.Collect(maps.Keys(before))), sorted(slices.Collect(maps.Keys(after)))); d != "" {
		s.t.Errorf("%s: Pod names (-before +after):\n%s", step, d)
	}
	if len(reps) != size {
		s.t.Errorf("%s: %d Pod replacements seen, want %d", step, len(reps), size)
		return
	}
	for i, r := range reps {
		if r.Serving.IsZero() {
			s.t.Errorf("%s: the new Pod of %s was never seen serving", step, r.Name)
		}
		if len(r.ServingAtLeave) != size-1 {
			s.t.Errorf("%s: %s left while only %v served", step, r.Name, r.ServingAtLeave)
		}
		if i > 0 && r.Left.Before(reps[i-1].Serving) {
			s.t.Errorf("%s: %s left at %s, before the new Pod of %s served (%s)", step, r.Name,
				r.Left.Format("15:04:05.000"), reps[i-1].Name, reps[i-1].Serving.Format("15:04:05.000"))
		}
	}
	if last := reps[size-1]; last.Name != leader {
		s.t.Errorf("%s: the last Pod replaced is %s, want %s, the leader before the change", step, last.Name, leader)
	}
}

// checkLearnerRollout: every member replaced by a new one, each through
// add learner → promote → remove of an outdated member before the next
// add (leadership moved before the leader's removal, which comes last), at
// most one learner and one member more than the size at any sample.
func (s *scenario) checkLearnerRollout(step string, size int, before map[string]string, actions []LoggedAction, sum sampleSummary, leader string) {
	s.t.Helper()
	var verbs, removed []string
	moved := -1
	for _, a := range actions {
		verb, rest, _ := strings.Cut(a.Action, " ")
		switch verb {
		case "move":
			moved = len(verbs)
			continue
		case "remove":
			// "remove member <name> (<id>)"
			f := strings.Fields(rest)
			if len(f) >= 2 {
				removed = append(removed, f[1])
			}
		}
		verbs = append(verbs, verb)
	}
	var want []string
	for range size {
		want = append(want, "add", "promote", "remove")
	}
	if d := cmp.Diff(want, verbs); d != "" {
		s.t.Errorf("%s: membership steps, leadership moves left out (-want +got):\n%s", step, d)
	}
	if d := cmp.Diff(sorted(slices.Collect(maps.Keys(before))), sorted(removed)); d != "" {
		s.t.Errorf("%s: members removed (-the members before +removed):\n%s", step, d)
	}
	if n := len(removed); n > 0 && removed[n-1] != leader {
		s.t.Errorf("%s: the last member removed is %s, want %s, the leader before the change", step, removed[n-1], leader)
	}
	if n := len(verbs); n > 0 && (moved < 0 || moved != n-1) {
		s.t.Errorf("%s: leadership moved before step %d of %d (%v), want just before the leader's removal", step, moved, n, verbs)
	}
	after := s.members()
	for name, id := range after {
		if _, ok := before[name]; ok {
			s.t.Errorf("%s: member %s is still there", step, name)
		}
		for old, oldID := range before {
			if id == oldID {
				s.t.Errorf("%s: member %s has the ID of %s", step, name, old)
			}
		}
	}
	if sum.MaxLearners > 1 || sum.MaxMembers > size+1 {
		s.t.Errorf("%s: up to %d learners and %d members at once, want at most 1 and %d: two members replaced at once",
			step, sum.MaxLearners, sum.MaxMembers, size+1)
	}
}

// followerStops counts, in the etcd log of a Pod name (which spans Pods
// recreated under it), the times its etcd stopped as a follower: on
// SIGTERM a follower logs that it skipped the leadership transfer.
func (s *scenario) followerStops(name string) int {
	s.t.Helper()
	data, err := os.ReadFile(s.env.Kubelet.ContainerLog(ns, name, "etcd"))
	if err != nil {
		s.t.Fatal(err)
	}
	return strings.Count(string(data), `"msg":"skipped leadership transfer; local server is not leader"`)
}

// clusterRuns are the container instances the kubelet started for the
// cluster's Pods since from.
func (s *scenario) clusterRuns(from time.Time) []harness.ContainerRun {
	var out []harness.ContainerRun
	for _, r := range s.env.Kubelet.ContainerRuns() {
		if r.Namespace == ns && strings.HasPrefix(r.Pod, exampleName+"-") && !r.Started.Before(from) {
			out = append(out, r)
		}
	}
	return out
}

// editPod edits spec.pod, creating it if the spec has none.
func (s *scenario) editPod(edit func(pod map[string]any)) {
	s.t.Helper()
	s.setSpec(func(spec map[string]any) {
		pod, _ := spec["pod"].(map[string]any)
		if pod == nil {
			pod = map[string]any{}
		}
		edit(pod)
		spec["pod"] = pod
	})
}

// oneHash is the spec hash every Pod carries; it fails the test when they
// differ.
func (s *scenario) oneHash() string {
	s.t.Helper()
	hashes := map[string]bool{}
	for _, p := range s.c.MemberPods() {
		hashes[p.SpecHash] = true
	}
	if len(hashes) != 1 {
		s.t.Fatalf("member Pods carry spec hashes %v, want one", slices.Sorted(maps.Keys(hashes)))
	}
	for h := range hashes {
		if h == "" {
			s.t.Fatal("member Pods carry no spec hash")
		}
		return h
	}
	return ""
}

// etcdLogTimes reads the times etcd logged msg in a Pod name's etcd log
// (which spans every instance under that name).
func (s *scenario) etcdLogTimes(pod, msg string) []time.Time {
	s.t.Helper()
	data, err := os.ReadFile(s.env.Kubelet.ContainerLog(ns, pod, "etcd"))
	if err != nil {
		s.t.Fatal(err)
	}
	var out []time.Time
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		var l struct {
			Msg string    `json:"msg"`
			TS  time.Time `json:"ts"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg {
			out = append(out, l.TS)
		}
	}
	return out
}

// restartFloor measures what etcd alone needed for a rolling change made
// in [from, to]: the start-to-serving time of every etcd started in the
// window and serving by to, and, withStops, the SIGTERM-to-exit time of
// every etcd that ran before from and exited in the window.
func (s *scenario) restartFloor(from, to time.Time, withStops bool) (stops, starts time.Duration, n int, detail []string) {
	s.t.Helper()
	for _, r := range s.env.Kubelet.ContainerRuns() {
		if r.Namespace != ns || !strings.HasPrefix(r.Pod, exampleName+"-") || r.Container != "etcd" {
			continue
		}
		if withStops && r.Started.Before(from) && !r.Exited.IsZero() && !r.Exited.Before(from) && !r.Exited.After(to) {
			if sig := firstIn(s.etcdLogTimes(r.Pod, "received signal; shutting down"), from, r.Exited); !sig.IsZero() {
				stops += r.Exited.Sub(sig)
				detail = append(detail, fmt.Sprintf("%s %s stopped in %s", r.Pod, shortUID(r.PodUID), r.Exited.Sub(sig).Round(time.Millisecond)))
			}
		}
		if r.Started.Before(from) || r.Started.After(to) || r.Ready.IsZero() || r.Ready.After(to) {
			continue
		}
		end := r.Exited
		if end.IsZero() {
			end = to
		}
		serving := r.Ready
		if at := firstIn(s.etcdLogTimes(r.Pod, "ready to serve client requests"), r.Started, end); at.After(serving) {
			serving = at
		}
		starts += serving.Sub(r.Started)
		n++
		detail = append(detail, fmt.Sprintf("%s %s started to Ready in %s, to serving in %s", r.Pod, shortUID(r.PodUID),
			r.Ready.Sub(r.Started).Round(time.Millisecond), serving.Sub(r.Started).Round(time.Millisecond)))
	}
	return stops, starts, n, detail
}

// logTimeline logs, relative to start, what the kubelet did with the
// cluster's containers between start and end (stops and starts, with
// readiness) and when the samples first saw each Pod gone: where the time
// of a rolling change above its floor goes.
func (s *scenario) logTimeline(step string, start, end time.Time, samples []RolloutSample) {
	s.t.Helper()
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("+%dms", t.Sub(start).Milliseconds())
	}
	var lines []string
	for _, r := range s.env.Kubelet.ContainerRuns() {
		if r.Namespace != ns || !strings.HasPrefix(r.Pod, exampleName+"-") {
			continue
		}
		if (r.Started.Before(start) || r.Started.After(end)) && (r.Exited.IsZero() || r.Exited.Before(start) || r.Exited.After(end)) {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s %s/%s pod %s: started %s ready %s exited %s", rel(minTime(r.Started, r.Exited, start)),
			r.Pod, r.Container, shortUID(r.PodUID), rel(r.Started), rel(r.Ready), rel(r.Exited)))
	}
	for i, smp := range samples {
		if i == 0 {
			continue
		}
		for name := range samples[i-1].Pods {
			if _, ok := smp.Pods[name]; !ok {
				lines = append(lines, fmt.Sprintf("%s %s: Pod gone (sample)", rel(smp.At), name))
			}
		}
	}
	for _, r := range s.env.MC.Records(ns, exampleName) {
		if r.Start.Before(start) || r.Start.After(end) {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s hook call (%s, resync %.1fs): %s", rel(r.Start), r.Duration.Round(time.Millisecond), r.ResyncAfter, progressingOf(r.Response)))
	}
	slices.SortFunc(lines, func(a, b string) int { return cmpRel(a, b) })
	s.t.Logf("%s: timeline:\n%s", step, strings.Join(lines, "\n"))
}
