package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// The fault scenarios: each breaks a running cluster under a continuous
// writer and checks what the hook does about it, and does not do. Each
// fault ends with a line in the failure table (ReportFailure).

const (
	faultVersion = currentVersion
	// partitionFor is as long as a partition that the hook must sit out:
	// a member whose Pod runs is never replaced for being unreachable.
	partitionFor = 30 * time.Second
	freezeFor    = 12 * time.Second
	// settleFor is how long a cluster is watched after a fault took
	// effect, for a step the hook should not take.
	settleFor = 4 * time.Second
	// quorumLostFor spans a couple of the hook's resyncs in trouble (5 s).
	quorumLostFor = 8 * time.Second
)

func newFaultScenario(t *testing.T, opts harness.Options) *scenario {
	t.Helper()
	testenv.Binary(t, testenv.Etcd(faultVersion))
	env := harness.New(t, opts)
	return &scenario{t: t, env: env, c: &Cluster{Env: env, Namespace: ns, Name: exampleName}}
}

// createSpec is create with a whole spec.
func (s *scenario) createSpec(step string, spec map[string]any) {
	s.t.Helper()
	s.startWriter(step)
	start, syncs := time.Now(), s.syncs()
	if _, err := s.env.MC.CreateParent(ns, exampleName, spec); err != nil {
		s.t.Fatal(err)
	}
	s.converge(step, start, syncs, spec["size"].(int))
}

// startFaultWriter is startWriter with StartKeepAliveWriter: a fault's
// writer must be able to leave a faulty member, as an application would.
func (s *scenario) startFaultWriter(step string) {
	s.t.Helper()
	w, err := StartKeepAliveWriter(s.env.Ctx(), s.c.ServiceURL(), "/writer/"+step+"/")
	if err != nil {
		s.t.Fatal(err)
	}
	s.w = w
	s.t.Cleanup(w.Stop)
	s.startHistory(step)
}

// faultWorld is what most faults must leave as it was: etcd's members by
// name and ID, and the member Pods by name and UID (a replaced Pod has the
// same name and another UID).
type faultWorld struct {
	Members map[string]string
	Pods    map[string]string
}

func (s *scenario) podUIDs() map[string]string {
	out := map[string]string{}
	for _, p := range s.c.Pods() {
		out[p.Name] = p.UID
	}
	return out
}

// membersThrough reads the member list linearizably through the named
// members only: a client that may pick a frozen or cut-off member would
// wait for it.
func (s *scenario) membersThrough(names []string) map[string]string {
	s.t.Helper()
	var ids map[string]string
	err := s.env.WaitFor(15*time.Second, "the member list through "+strings.Join(names, ", "), func() (bool, string) {
		cli, err := NewClient(s.memberURLs(names)...)
		if err != nil {
			return false, err.Error()
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(s.env.Ctx(), 3*time.Second)
		defer cancel()
		resp, err := cli.MemberList(ctx)
		if err != nil {
			return false, err.Error()
		}
		ids = MemberIDs(resp.Members)
		return true, ""
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return ids
}

func (s *scenario) world(through []string) faultWorld {
	s.t.Helper()
	return faultWorld{Members: s.membersThrough(through), Pods: s.podUIDs()}
}

func (s *scenario) memberURLs(names []string) []string {
	var urls []string
	for _, n := range names {
		urls = append(urls, s.c.MemberURL(n))
	}
	return urls
}

// loggedActions are the membership changes the hook made so far.
func (s *scenario) loggedActions() []LoggedAction {
	s.t.Helper()
	logged, err := LoggedActions(s.env.Hook.LogPath, s.c)
	if err != nil {
		s.t.Fatal(err)
	}
	return logged
}

func actionVerbs(actions []LoggedAction) []string {
	verbs := []string{}
	for _, a := range actions {
		verb, _, _ := strings.Cut(a.Action, " ")
		verbs = append(verbs, verb)
	}
	return verbs
}

// checkNoMembershipChange fails on any membership change logged after the
// first since of them.
func (s *scenario) checkNoMembershipChange(fault string, since int) {
	s.t.Helper()
	if extra := s.loggedActions()[since:]; len(extra) != 0 {
		s.t.Errorf("%s: the hook changed the membership: %+v", fault, extra)
	}
}

func (s *scenario) checkWorld(fault string, want faultWorld, through []string) {
	s.t.Helper()
	if d := cmp.Diff(want, s.world(through)); d != "" {
		s.t.Errorf("%s: members (name → ID) and Pods (name → UID) changed (-want +got):\n%s", fault, d)
	}
}

func except(names []string, out ...string) []string {
	var rest []string
	for _, n := range names {
		if !slices.Contains(out, n) {
			rest = append(rest, n)
		}
	}
	return rest
}

// follower is a member that is not the leader, the first by name.
func (s *scenario) follower(leader string) string {
	s.t.Helper()
	rest := except(s.c.PodNames(), leader)
	if len(rest) == 0 {
		s.t.Fatal("no follower")
	}
	return rest[0]
}

// waitParent waits until the parent's status, for the current generation,
// satisfies ok.
func (s *scenario) waitParent(timeout time.Duration, what string, ok func(ParentStatus) bool) ParentStatus {
	s.t.Helper()
	var st ParentStatus
	err := s.env.WaitFor(timeout, what, func() (bool, string) {
		gen, got, found := s.c.Parent()
		st = got
		return found && got.ObservedGeneration == gen && ok(got), describeStatus(got)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

func describeStatus(st ParentStatus) string {
	var conds []string
	for _, c := range st.Conditions {
		if c.Type != "Upgrading" {
			conds = append(conds, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
		}
	}
	return fmt.Sprintf("phase %s, %s, unready %v", st.Phase, strings.Join(conds, " "), st.Members.Unready)
}

// faultWatch is what watchFault saw while a fault lasted.
type faultWatch struct {
	Puts, Served int
	FirstServed  time.Duration // after the start of the watch
	LastFailure  time.Duration // after the start; 0 without failure
	LastErr      error
	// Violations are the faulty members' Pods found deleted, replaced or
	// out of Running: the hook must leave a running Pod alone.
	Violations []string
	Status     ParentStatus // the last one seen
	// QuorumLost counts the statuses that said so.
	QuorumLost int
}

// watchFault puts a key through the healthy members once a second for d,
// and checks each time that the faulty members' Pods are the ones of pods.
func (s *scenario) watchFault(d time.Duration, healthy, faulty []string, pods map[string]string, prefix string) faultWatch {
	var w faultWatch
	start := time.Now()
	for n := 0; time.Since(start) < d; n++ {
		tick := time.Now()
		w.Puts++
		err := PutVia(s.env.Ctx(), s.memberURLs(healthy), fmt.Sprintf("%s%04d", prefix, n), "x", 1500*time.Millisecond)
		if err == nil {
			if w.Served == 0 {
				w.FirstServed = time.Since(start)
			}
			w.Served++
		} else {
			w.LastFailure, w.LastErr = time.Since(start), err
		}
		current := podsByName(s.c.Pods())
		for _, name := range faulty {
			p, ok := current[name]
			phase := s.c.PodPhase(name)
			if !ok || p.UID != pods[name] || p.Terminating || phase != "Running" {
				w.Violations = append(w.Violations, fmt.Sprintf("%s at %s: %+v phase %q", name, time.Since(start).Round(time.Second), p, phase))
			}
		}
		if _, st, ok := s.c.Parent(); ok {
			w.Status = st
			if _, reason := st.Condition("Available"); reason == "QuorumLost" {
				w.QuorumLost++
			}
		}
		if s.env.Ctx().Err() != nil {
			break
		}
		time.Sleep(time.Until(tick.Add(time.Second)))
	}
	return w
}

func readFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	return string(data), err
}

func podsByName(pods []Pod) map[string]Pod {
	out := map[string]Pod{}
	for _, p := range pods {
		out[p.Name] = p
	}
	return out
}

// recovery is how long after the end of a fault each sign of health took.
type recovery struct {
	Ready    time.Duration // the world converged (Pods ready, etcd's list)
	HookSees time.Duration // the hook's status says every voter answers
	CaughtUp time.Duration // the member read, from its own store, a key put after the fault
}

// Healthy is when the last sign came.
func (r recovery) Healthy() time.Duration { return max(r.Ready, r.HookSees, r.CaughtUp) }

func (r recovery) String() string {
	return fmt.Sprintf("Pods ready and etcd's list consistent after %s, the hook reached every member after %s, the member caught up after %s",
		round(r.Ready), round(r.HookSees), round(r.CaughtUp))
}

// recoverFrom waits for a cluster of size members to be healthy again after a
// fault of member ended at end: converged (with the writer's check, see
// converge), the hook reaching every member, and member caught up with
// what was written after the fault. Converged alone could pass on a member
// that answers from a stale store: a serializable /health does not need a
// leader.
func (s *scenario) recoverFrom(fault, member string, healthy []string, end time.Time, syncs, size int) (recovery, Figure) {
	s.t.Helper()
	marker := fmt.Sprintf("/fault/marker/%d", end.UnixNano())
	if err := PutVia(s.env.Ctx(), s.memberURLs(healthy), marker, "caught-up", 5*time.Second); err != nil {
		s.t.Fatalf("%s: marker put: %v", fault, err)
	}
	// A stalled peer connection waits out TCP's retransmission backoff,
	// which a 30 s cut has grown to tens of seconds.
	type result struct {
		at  time.Time
		err error
	}
	caughtUp := make(chan result, 1)
	go func() {
		err := s.env.WaitFor(60*time.Second, member+" reads the marker from its own store", func() (bool, string) {
			v, ok, err := LocalGet(s.env.Ctx(), s.c.MemberURL(member), marker)
			return err == nil && ok && v == "caught-up", fmt.Sprintf("%q %v %v", v, ok, err)
		})
		caughtUp <- result{time.Now(), err}
	}()
	var r recovery
	fig := s.converge(fault, end, syncs, size)
	r.Ready = fig.Wall
	res := <-caughtUp
	if res.err != nil {
		s.t.Errorf("%s: %v", fault, res.err)
	}
	r.CaughtUp = res.at.Sub(end)

	all := fmt.Sprintf("%d of %d voting members answer", size, size)
	s.waitParent(60*time.Second, "the hook reaching every member", func(st ParentStatus) bool {
		return strings.HasPrefix(st.ConditionMessage("Available"), all)
	})
	var falseAlarm string
	for _, rec := range s.env.MC.Records(ns, exampleName) {
		var resp struct {
			Status ParentStatus `json:"status"`
		}
		if rec.Start.Before(end) || rec.HTTPStatus != 200 || json.Unmarshal(rec.Response, &resp) != nil {
			continue
		}
		msg := resp.Status.ConditionMessage("Available")
		if _, reason := resp.Status.Condition("Available"); reason == "QuorumLost" && falseAlarm == "" {
			falseAlarm = msg
		}
		if r.HookSees == 0 && strings.HasPrefix(msg, all) {
			r.HookSees = rec.Start.Add(rec.Duration).Sub(end)
		}
	}
	s.t.Logf("%s: %s", fault, r)
	// A member back from a fault may answer Status before it has heard
	// from the leader; it cannot serve a linearizable read yet, which is
	// no reason to report the quorum of the others lost.
	if falseAlarm != "" {
		s.t.Errorf("%s: an answer after the fault said QuorumLost, while a quorum served: %q", fault, falseAlarm)
	}
	// The hook dials a member that did not answer afresh on the next sync;
	// a connection kept from before the fault would stall for as long as
	// TCP's backoff (etcdclient's TestStalledMemberIsSeenOnceHealed).
	if limit := 10 * time.Second; r.HookSees > limit {
		s.t.Errorf("%s: the hook reached every member %s after the fault ended, want within %s", fault, round(r.HookSees), limit)
	}
	return r, fig
}

// checkServed asserts that the healthy members served through a fault, once
// leadership had settled.
func (s *scenario) checkServed(fault string, w faultWatch, settle time.Duration) {
	s.t.Helper()
	if w.Served == 0 || w.LastFailure > settle {
		s.t.Errorf("%s: %d of %d puts through the healthy members acknowledged, the last failure %s after the fault (%v), want none after %s",
			fault, w.Served, w.Puts, w.LastFailure.Round(time.Millisecond), w.LastErr, settle)
	}
	if len(w.Violations) > 0 {
		s.t.Errorf("%s: the faulty member's Pod was touched: %v", fault, w.Violations)
	}
	if w.QuorumLost > 0 {
		s.t.Errorf("%s: %d of %d statuses said QuorumLost while a quorum served", fault, w.QuorumLost, w.Puts)
	}
}

// Fault 1: a member, the leader, cut off the network for 30 s. Its Pod
// keeps running, so the hook must sit it out: no removal, no replacement.
func TestFaultPartitionedMember(t *testing.T) {
	longTail(t, "a member cut off, kept and caught up, is TestFaultFrozenMembers")
	harness.RequirePartition(t)
	s := newFaultScenario(t, harness.Options{Kubelet: harness.KubeletConfig{PodGroups: true}})
	s.create("setup", faultVersion, 3)
	const fault = "the leader partitioned for 30 s, then healed"
	s.startFaultWriter("partition")
	s.waitWrites(writesAround)
	victim := s.leader()
	t.Logf("%s: cutting off %s", fault, victim)
	healthy := except(s.c.PodNames(), victim)
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())

	if err := s.env.Kubelet.Partition(ns, victim); err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = s.env.Kubelet.Heal(ns, victim)
		}
	})
	w := s.watchFault(partitionFor, healthy, []string{victim}, before.Pods, "/fault/partition/probe/")
	// The two others elect a leader within a few election timeouts.
	s.checkServed(fault, w, 10*time.Second)
	if avail, _ := w.Status.Condition("Available"); avail != "True" || w.Status.Phase != "Running" || !slices.Contains(w.Status.Members.Unready, victim) {
		t.Errorf("%s: status at the end of the cut: %s, want Running, Available=True and %s unready", fault, describeStatus(w.Status), victim)
	}
	s.checkWorld(fault+" (during the cut)", before, healthy)
	s.checkNoMembershipChange(fault+" (during the cut)", logged)

	if err := s.env.Kubelet.Heal(ns, victim); err != nil {
		t.Fatal(err)
	}
	healed = true
	healAt, syncs := time.Now(), s.syncs()
	rec, fig := s.recoverFrom(fault, victim, healthy, healAt, syncs, 3)
	s.checkWorld(fault, before, s.c.PodNames())
	s.checkNoMembershipChange(fault, logged)
	checkCutOff(t, s, victim, cutAt, healAt)

	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "quorum kept by the other 2, which serve; the member's Pod, still Running, neither removed nor replaced; after healing it catches up; member list unchanged",
		Observed: fmt.Sprintf("%d/%d puts through the other 2 acknowledged during the cut (first after %s); status at the end of the cut: %s; Pod kept (same UID, Running); 0 membership changes; member list unchanged; after healing: %s",
			w.Served, w.Puts, w.FirstServed.Round(100*time.Millisecond), describeStatus(w.Status), rec),
		Acked: fig.Acked, Lost: fig.Lost, Healthy: rec.Healthy(),
	})
}

// checkCutOff reads the partitioned member's own log: between the cut
// and the heal, etcd stopped hearing its peers, either a leader whose
// check-quorum stepped it down or a follower that campaigned for lack of
// heartbeats. Either proves the cut went both ways: a cut of the
// connections to the member alone would not do it, since what its peers
// send it comes back on connections it opened itself.
func checkCutOff(t *testing.T, s *scenario, victim string, cut, healed time.Time) {
	t.Helper()
	data, err := readFile(s.env.Kubelet.ContainerLog(ns, victim, "etcd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(data, "\n") {
		var entry struct {
			TS  time.Time `json:"ts"`
			Msg string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &entry) != nil || entry.TS.Before(cut) || entry.TS.After(healed) {
			continue
		}
		if strings.Contains(entry.Msg, "stepped down to follower since quorum is not active") || strings.Contains(entry.Msg, "became pre-candidate") {
			return
		}
	}
	t.Errorf("the partitioned member never noticed it had lost its peers; its log:\n%s", tail(data, 3000))
}

// Faults 2 and 3: one member frozen (SIGSTOP) while the others serve, then
// two of three frozen, which loses the quorum: the hook must say so and
// change nothing; both recover by themselves on SIGCONT.
func TestFaultFrozenMembers(t *testing.T) {
	s := newFaultScenario(t, harness.Options{})
	s.create("setup", faultVersion, 3)
	s.frozenMember()
	if t.Failed() {
		return
	}
	s.quorumLost()
}

func (s *scenario) frozenMember() {
	t := s.t
	fault := fmt.Sprintf("a follower frozen (SIGSTOP) for %s, then SIGCONT", freezeFor)
	s.startFaultWriter("frozen")
	s.waitWrites(writesAround)
	victim := s.follower(s.leader())
	healthy := except(s.c.PodNames(), victim)
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())

	if err := s.env.Kubelet.Pause(ns, victim, ""); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = s.env.Kubelet.Resume(ns, victim, "")
		}
	})
	w := s.watchFault(freezeFor, healthy, []string{victim}, before.Pods, "/fault/frozen/probe/")
	// A follower's freeze costs no election.
	s.checkServed(fault, w, 3*time.Second)
	if avail, _ := w.Status.Condition("Available"); avail != "True" || w.Status.Phase != "Running" || !slices.Contains(w.Status.Members.Unready, victim) {
		t.Errorf("%s: status at the end of the freeze: %s, want Running, Available=True and %s unready", fault, describeStatus(w.Status), victim)
	}
	s.checkWorld(fault+" (frozen)", before, healthy)
	s.checkNoMembershipChange(fault+" (frozen)", logged)

	if err := s.env.Kubelet.Resume(ns, victim, ""); err != nil {
		t.Fatal(err)
	}
	resumed = true
	resumeAt, syncs := time.Now(), s.syncs()
	rec, fig := s.recoverFrom(fault, victim, healthy, resumeAt, syncs, 3)
	s.checkWorld(fault, before, s.c.PodNames())
	s.checkNoMembershipChange(fault, logged)

	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "as for a partition: quorum kept, the others serve, the Pod (Running) kept, member caught up after SIGCONT, member list unchanged",
		Observed: fmt.Sprintf("%d/%d puts through the other 2 acknowledged while frozen; status while frozen: %s; Pod kept; 0 membership changes; member list unchanged; after SIGCONT: %s",
			w.Served, w.Puts, describeStatus(w.Status), rec),
		Acked: fig.Acked, Lost: fig.Lost, Healthy: rec.Healthy(),
	})
}

func (s *scenario) quorumLost() {
	t := s.t
	const fault = "2 of 3 members frozen (SIGSTOP): quorum lost, then SIGCONT"
	s.startFaultWriter("quorum-lost")
	s.waitWrites(writesAround)
	leader := s.leader()
	victims := []string{leader, s.follower(leader)}
	live := except(s.c.PodNames(), victims...)
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())

	frozenAt := time.Now()
	for _, v := range victims {
		if err := s.env.Kubelet.Pause(ns, v, ""); err != nil {
			t.Fatal(err)
		}
	}
	resumed := false
	resume := func() {
		for _, v := range victims {
			if err := s.env.Kubelet.Resume(ns, v, ""); err != nil {
				t.Error(err)
			}
		}
		resumed = true
	}
	t.Cleanup(func() {
		if !resumed {
			resume()
		}
	})
	st := s.waitParent(30*time.Second, "QuorumLost", func(st ParentStatus) bool {
		avail, reason := st.Condition("Available")
		return st.Phase == "Failed" && avail == "False" && reason == "QuorumLost"
	})
	reported := time.Since(frozenAt)
	msg := st.ConditionMessage("Available")
	for _, v := range victims {
		if !strings.Contains(msg, v) {
			t.Errorf("%s: the Available condition does not name the unreachable member %s: %q", fault, v, msg)
		}
	}
	if strings.Contains(msg, live[0]) {
		t.Errorf("%s: the Available condition names the member that answers, %s: %q", fault, live[0], msg)
	}
	if deg, reason := st.Condition("Degraded"); deg != "True" || reason != "QuorumLost" {
		t.Errorf("%s: Degraded = %s/%s, want True/QuorumLost", fault, deg, reason)
	}
	// A loss is Stalled (Flux fails its health check at once) only once
	// confirmed: the first status that reports it waits, as for an
	// election.
	if stalled, _ := st.Condition("Stalled"); stalled == "True" && reported < quorumLossConfirm {
		t.Errorf("%s: Stalled as soon as the loss was reported, %s after the freeze: %s", fault, reported.Round(100*time.Millisecond), describeStatus(st))
	}
	s.checkHealth("quorum-lost", quorumLossStalledWithin, healthDegraded, conditionIs("Stalled", "True", "QuorumLost"))
	// Without a quorum nothing can be served, and nothing may change.
	syncsLost := s.syncs()
	w := s.watchFault(quorumLostFor, live, victims, before.Pods, "/fault/quorum-lost/probe/")
	syncsLost = s.syncs() - syncsLost
	if syncsLost == 0 {
		t.Errorf("%s: no sync in %s without quorum", fault, quorumLostFor)
	}
	if len(w.Violations) > 0 {
		t.Errorf("%s: a frozen member's Pod was touched: %v", fault, w.Violations)
	}
	if w.Served > 0 {
		t.Errorf("%s: %d puts acknowledged by one member of three: the quorum was not lost", fault, w.Served)
	}
	if w.Status.Phase != "Failed" {
		t.Errorf("%s: status after %s without quorum: %s, want still Failed", fault, quorumLostFor, describeStatus(w.Status))
	}
	s.checkNoMembershipChange(fault+" (without quorum)", logged)

	resume()
	resumeAt, syncs := time.Now(), s.syncs()
	fig := s.converge(fault, resumeAt, syncs, 3)
	s.checkWorld(fault, before, s.c.PodNames())
	s.checkNoMembershipChange(fault, logged)

	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "status QuorumLost (phase Failed) naming the unreachable members; no removal, no growth; recovers by itself after SIGCONT",
		Observed: fmt.Sprintf("QuorumLost reported %s after the freeze: %q; held %s more (%d syncs): %d/%d puts through the live member acknowledged (none can be), Pods kept, 0 membership changes; member list unchanged after SIGCONT",
			reported.Round(100*time.Millisecond), msg, quorumLostFor, syncsLost, w.Served, w.Puts),
		Acked: fig.Acked, Lost: fig.Lost, Healthy: fig.Wall,
	})
}

// Faults 4 and 5: two of five members lost at once, their Pods deleted
// (emptyDir: the data is gone, the members are replaced) and then
// killed (kill -9: they restart on their data, nothing changes).
func TestFaultTwoOfFiveMembersLost(t *testing.T) {
	longTail(t, "dead members' replacement is TestNoClientReachesALearner, killed members' restart TestKilledMemberRestartsWithoutMembershipChange")
	s := newFaultScenario(t, harness.Options{})
	s.create("setup", faultVersion, 5)
	s.twoPodsDeleted()
	if t.Failed() {
		return
	}
	s.twoKilled()
}

func (s *scenario) twoPodsDeleted() {
	t := s.t
	const fault = "2 of 5 Pods deleted at once, the leader's among them (emptyDir)"
	s.startFaultWriter("two-deleted")
	s.waitWrites(writesAround)
	leader := s.leader()
	victims := []string{leader, s.follower(leader)}
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())

	start, syncs := time.Now(), s.syncs()
	for _, v := range victims {
		if err := s.env.DeletePod(ns, v); err != nil {
			t.Fatal(err)
		}
	}
	fig := s.converge(fault, start, syncs, 5)
	after := s.world(s.c.PodNames())

	survivors := map[string]string{}
	for name, id := range before.Members {
		if !slices.Contains(victims, name) {
			survivors[name] = id
		}
	}
	kept, added := map[string]string{}, []string{}
	for name, id := range after.Members {
		if _, ok := before.Members[name]; ok {
			kept[name] = id
		} else {
			added = append(added, name)
		}
		for _, v := range victims {
			if id == before.Members[v] {
				t.Errorf("%s: member %s has the ID of the deleted member %s", fault, name, v)
			}
		}
	}
	if d := cmp.Diff(survivors, kept); d != "" {
		t.Errorf("%s: surviving members (name → ID) (-want +got):\n%s", fault, d)
	}
	// One dead member out at a time while the other three keep the quorum,
	// then one learner in at a time.
	changes := s.loggedActions()[logged:]
	if d := cmp.Diff([]string{"remove", "remove", "add", "promote", "add", "promote"}, actionVerbs(changes)); d != "" {
		t.Errorf("%s: membership changes (-want +got):\n%s\n%+v", fault, d, changes)
	}
	var removed []string
	for _, a := range changes {
		if strings.HasPrefix(a.Action, "remove") {
			removed = append(removed, strings.Fields(a.Action)[2])
		}
	}
	if d := cmp.Diff(sorted(victims), sorted(removed)); d != "" {
		t.Errorf("%s: removed members (-want +got):\n%s", fault, d)
	}

	var steps []string
	for _, a := range changes {
		f := strings.Fields(a.Action)
		steps = append(steps, f[0]+" "+f[len(f)-2])
	}
	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "dead members removed one at a time while the other 3 keep quorum, then replaced one at a time (learner, promote); no other change",
		Observed: fmt.Sprintf("membership steps: %s; the 3 survivors kept their IDs; %d new members with new IDs", strings.Join(steps, ", "), len(added)),
		Acked:    fig.Acked, Lost: fig.Lost, Healthy: fig.Wall,
	})
}

func (s *scenario) twoKilled() {
	t := s.t
	const fault = "2 of 5 members killed at once (kill -9), the leader's among them"
	s.startFaultWriter("two-killed")
	s.waitWrites(writesAround)
	leader := s.leader()
	victims := []string{leader, s.follower(leader)}
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())
	restarts := podsByName(s.c.Pods())

	start, syncs := time.Now(), s.syncs()
	for _, v := range victims {
		if err := s.env.Kubelet.KillContainer(ns, v, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.env.WaitFor(convergeTimeout, "both restarted", func() (bool, string) {
		now := podsByName(s.c.Pods())
		for _, v := range victims {
			if now[v].Restarts != restarts[v].Restarts+1 {
				return false, fmt.Sprintf("%+v", now[v])
			}
		}
		return true, ""
	}); err != nil {
		t.Fatal(err)
	}
	fig := s.converge(fault, start, syncs, 5)
	s.checkWorld(fault, before, s.c.PodNames())
	s.checkNoMembershipChange(fault, logged)
	for _, v := range victims {
		s.checkRestartedFromData(fault, v)
	}

	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "both restart on their data (restartPolicy Always); no membership change",
		Observed: "both restarted once in the same Pods; 0 membership changes; member names and IDs unchanged",
		Acked:    fig.Acked, Lost: fig.Lost, Healthy: fig.Wall,
	})
}

// Fault 6: every member Pod of a cluster on PVCs deleted at once. The data
// survives on the claims, so the cluster must come back as it was.
func TestFaultAllPodsDeletedWithPVCs(t *testing.T) {
	s := newFaultScenario(t, harness.Options{})
	s.createSpec("setup (PVCs)", map[string]any{"size": 3, "version": faultVersion, "pod": map[string]any{
		"persistentVolumeClaimSpec": map[string]any{
			"accessModes": []any{"ReadWriteOnce"},
			"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
		},
	}})
	const fault = "all 3 Pods deleted at once (data on PVCs)"
	s.startFaultWriter("all-deleted")
	s.waitWrites(writesAround)
	if err := PutVia(s.env.Ctx(), s.c.MemberURLs(), "/fault/all-deleted/before", "kept", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	before := s.world(s.c.PodNames())
	claims := s.claimUIDs()
	logged := len(s.loggedActions())

	start, syncs := time.Now(), s.syncs()
	for name := range before.Pods {
		if err := s.env.DeletePod(ns, name); err != nil {
			t.Fatal(err)
		}
	}
	fig := s.converge(fault, start, syncs, 3)
	after := s.world(s.c.PodNames())
	if d := cmp.Diff(before.Members, after.Members); d != "" {
		t.Errorf("%s: members (name → ID) (-want +got):\n%s", fault, d)
	}
	for name, uid := range after.Pods {
		if before.Pods[name] == uid {
			t.Errorf("%s: Pod %s was not recreated (same UID)", fault, name)
		}
	}
	if d := cmp.Diff(claims, s.claimUIDs()); d != "" {
		t.Errorf("%s: PVCs (name → UID) (-want +got):\n%s", fault, d)
	}
	if changes := s.loggedActions()[logged:]; len(changes) != 0 {
		t.Errorf("%s: membership changes: %+v", fault, changes)
	}
	for name := range after.Pods {
		s.checkRestartedFromData(fault, name)
	}
	v, ok, err := LocalGet(s.env.Ctx(), s.c.MemberURL(s.leader()), "/fault/all-deleted/before")
	if err != nil || !ok || v != "kept" {
		t.Errorf("%s: the key written before the deletion reads %q (present %v, %v)", fault, v, ok, err)
	}

	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "Pods recreated on their claims; the same members (names and IDs), no new member; the data written before readable",
		Observed: "3 Pods recreated (new UIDs) on the same 3 PVCs; member names and IDs unchanged; 0 membership changes; the key written before, and every acknowledged put, readable",
		Acked:    fig.Acked, Lost: fig.Lost, Healthy: fig.Wall,
	})
}

// checkRestartedFromData reads the member's last etcd run: etcd says
// "restarting local member" when it finds its WAL, and "starting local
// member" on an empty data dir. The log is the Pod name's, so it spans a
// Pod recreated under the same name.
func (s *scenario) checkRestartedFromData(fault, member string) {
	s.t.Helper()
	data, err := readFile(s.env.Kubelet.ContainerLog(ns, member, "etcd"))
	if err != nil {
		s.t.Fatal(err)
	}
	runs := strings.Split(data, testenv.LogMarker)
	if last := runs[len(runs)-1]; !strings.Contains(last, "restarting local member") {
		s.t.Errorf("%s: the etcd of %s did not restart from its data; its last run:\n%s", fault, member, tail(last, 2000))
	}
}

func (s *scenario) claimUIDs() map[string]string {
	out := map[string]string{}
	for _, obj := range s.env.API.List(harness.TypePVC, ns) {
		md, _ := obj["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		uid, _ := md["uid"].(string)
		out[name] = uid
	}
	return out
}

// Faults 7 to 9, on one cluster: requests the hook must refuse, a spec it
// must refuse, and a hook that fails in the middle of a scale-out.
func TestFaultBadInputAndFailingHook(t *testing.T) {
	s := newFaultScenario(t, harness.Options{})
	s.create("setup", faultVersion, 3)
	s.badRequests()
	if t.Failed() {
		return
	}
	s.invalidSpec()
	if t.Failed() {
		return
	}
	s.hookFailsDuringScaleOut()
}

// lastSyncRequest is the last sync request Metacontroller made that the
// hook answered, as a JSON tree: bad requests are made from a real one.
func (s *scenario) lastSyncRequest() map[string]any {
	s.t.Helper()
	recs := s.env.MC.Records(ns, exampleName)
	for i := len(recs) - 1; i >= 0; i-- {
		if r := recs[i]; !r.Finalizing && r.HTTPStatus == 200 {
			var req map[string]any
			if err := json.Unmarshal(r.Request, &req); err != nil {
				s.t.Fatal(err)
			}
			return req
		}
	}
	s.t.Fatal("no sync request answered yet")
	return nil
}

func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// edited returns a deep copy of a request with edit applied.
func edited(t *testing.T, req map[string]any, edit func(req map[string]any)) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(jsonOf(t, req), &out); err != nil {
		t.Fatal(err)
	}
	edit(out)
	return out
}

func parentOf(req map[string]any) map[string]any {
	p, _ := req["parent"].(map[string]any)
	return p
}

func (s *scenario) badRequests() {
	t := s.t
	const fault = "malformed, oversized, wrong-kind requests sent straight to /sync"
	s.startFaultWriter("bad-requests")
	s.waitWrites(writesAround)
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())

	// Each bad request asks for 5 members: had the hook acted on any, it
	// would have added one.
	base := s.lastSyncRequest()
	grown := edited(t, base, func(r map[string]any) { parentOf(r)["spec"].(map[string]any)["size"] = 5 })
	raw := jsonOf(t, grown)
	oversized := edited(t, grown, func(r map[string]any) {
		md := parentOf(r)["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
			md["annotations"] = ann
		}
		ann["padding"] = strings.Repeat("x", 5<<20)
	})
	wrongKind := edited(t, grown, func(r map[string]any) {
		parentOf(r)["apiVersion"], parentOf(r)["kind"] = "apps/v1", "Deployment"
	})
	badChild := edited(t, grown, func(r map[string]any) {
		pods := r["children"].(map[string]any)["Pod.v1"].(map[string]any)
		for name := range pods {
			pods[name] = 42
		}
	})
	cases := []struct {
		name, contentType string
		body              []byte
		status            int
		mentions          string
	}{
		{"truncated JSON", "application/json", raw[:len(raw)/2], 400, "not a Metacontroller hook request"},
		{"5 MiB body", "application/json", jsonOf(t, oversized), 413, "larger than 4 MiB"},
		{"parent of the wrong kind", "application/json", jsonOf(t, wrongKind), 422, `"Deployment"`},
		{"no parent", "application/json", []byte(`{"children": {}}`), 422, "no parent"},
		{"a Pod child that is not an object", "application/json", jsonOf(t, badChild), 400, "does not decode"},
		{"Content-Type text/plain", "text/plain", raw, 415, "Content-Type"},
	}
	type verdict struct {
		Status   int
		JSON     bool // a JSON body with an "error"
		Mentions bool // the error names the problem
	}
	var seen []string
	for _, c := range cases {
		a, err := PostHook(s.env.Ctx(), s.env.Hook.URL()+"/sync", c.contentType, c.body)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := verdict{a.Status, strings.HasPrefix(a.ContentType, "application/json") && a.Error != "", strings.Contains(a.Error, c.mentions)}
		if d := cmp.Diff(verdict{c.status, true, true}, got); d != "" {
			t.Errorf("%s: answer (-want +got):\n%s\nbody: %s", c.name, d, tail(a.Body, 500))
		}
		seen = append(seen, fmt.Sprintf("%s → %d", c.name, a.Status))
		t.Logf("%s: %s → %d %s", fault, c.name, a.Status, strings.TrimSpace(a.Body))
	}
	// Metacontroller keeps syncing meanwhile; the cluster must not move.
	w := s.watchFault(settleFor, s.c.PodNames(), nil, nil, "/fault/bad-requests/probe/")
	s.checkServed(fault, w, 0)
	s.checkWorld(fault, before, s.c.PodNames())
	s.checkNoMembershipChange(fault, logged)
	fig := s.converge(fault, time.Now(), s.syncs(), 3)

	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "a 4xx with a JSON body naming the problem; the running cluster untouched (members and Pods unchanged)",
		Observed: fmt.Sprintf("%s, each with a JSON {\"error\"} naming the problem (e.g. %q); members and Pods unchanged, 0 membership changes",
			strings.Join(seen, ", "), "request body is larger than 4 MiB"),
		Acked: fig.Acked, Lost: fig.Lost, Undisturbed: true,
	})
}

// setSpec edits the parent's spec directly: the harness has no CRD
// validation, so a spec the API server would refuse gets through, as it
// would from a cluster whose CRD lacks the schema.
func (s *scenario) setSpec(edit func(spec map[string]any)) {
	s.t.Helper()
	if _, err := s.env.MC.UpdateParentSpec(ns, exampleName, edit); err != nil {
		s.t.Fatal(err)
	}
}

// checkFrozen watches an invalid spec's cluster: every child kept as it is
// (Metacontroller creates, updates and deletes nothing), and no membership
// change.
func (s *scenario) checkFrozen(fault string, before faultWorld, logged int) {
	s.t.Helper()
	m0 := s.env.MC.Metrics(ns, exampleName)
	// A frozen answer asks for no resync: child events and the periodic
	// resync are what would call the hook, and each must keep everything.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range int(settleFor / time.Second) {
			s.env.MC.Enqueue(ns, exampleName)
			time.Sleep(time.Second)
		}
	}()
	s.watchFault(settleFor, s.c.PodNames(), nil, nil, "/fault/invalid-spec/probe/")
	<-done
	m1 := s.env.MC.Metrics(ns, exampleName)
	ops := func(m harness.Metrics) [3]int { return [3]int{m.ChildCreates, m.ChildUpdates, m.ChildDeletes} }
	if d := cmp.Diff(ops(m0), ops(m1)); d != "" {
		s.t.Errorf("%s: child creates, updates, deletes while the spec was invalid (-want +got):\n%s", fault, d)
	}
	if m1.Syncs-m0.Syncs < 2 {
		s.t.Errorf("%s: %d syncs in %s: the freeze was not exercised", fault, m1.Syncs-m0.Syncs, settleFor)
	}
	s.checkWorld(fault, before, s.c.PodNames())
	s.checkNoMembershipChange(fault, logged)
}

func (s *scenario) invalidSpec() {
	t := s.t
	const fault = `invalid spec applied to a running cluster (size -1, then version "latest"), then fixed`
	s.startFaultWriter("invalid-spec")
	s.waitWrites(writesAround)
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())

	var messages []string
	for _, bad := range []struct {
		field string
		edit  func(spec map[string]any)
	}{
		{"spec.size", func(spec map[string]any) { spec["size"] = -1 }},
		{"spec.version", func(spec map[string]any) { spec["size"], spec["version"] = 3, "latest" }},
	} {
		s.setSpec(bad.edit)
		st := s.waitParent(30*time.Second, "Degraded InvalidSpec naming "+bad.field, func(st ParentStatus) bool {
			deg, reason := st.Condition("Degraded")
			return deg == "True" && reason == "InvalidSpec" && strings.Contains(st.ConditionMessage("Degraded"), bad.field)
		})
		if prog, reason := st.Condition("Progressing"); prog != "False" || reason != "InvalidSpec" {
			t.Errorf("%s: Progressing = %s/%s, want False/InvalidSpec", fault, prog, reason)
		}
		s.checkHealth("invalid-spec", 30*time.Second, healthDegraded, conditionIs("Stalled", "True", "InvalidSpec"))
		msg := st.ConditionMessage("Degraded")
		if i := strings.Index(msg, bad.field); i >= 0 {
			msg = msg[i:]
		}
		messages = append(messages, fmt.Sprintf("%q", msg))
		s.checkFrozen(fault+" ("+bad.field+")", before, logged)
	}

	s.setSpec(func(spec map[string]any) { spec["version"] = faultVersion })
	fixedAt, syncs := time.Now(), s.syncs()
	fig := s.converge(fault, fixedAt, syncs, 3)
	_, st, _ := s.c.Parent()
	if deg, reason := st.Condition("Degraded"); deg != "False" {
		t.Errorf("%s: Degraded = %s/%s after the fix, want False", fault, deg, reason)
	}
	s.checkWorld(fault, before, s.c.PodNames())
	s.checkNoMembershipChange(fault, logged)

	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "Degraded/InvalidSpec naming the field; every Pod kept, member list unchanged; fixing the spec resumes (the next fault scales the cluster)",
		Observed: fmt.Sprintf("Degraded/InvalidSpec %s; Progressing False/InvalidSpec; no child created, updated or deleted; 0 membership changes; converged again after the fix", strings.Join(messages, ", then ")),
		Acked:    fig.Acked, Lost: fig.Lost, Healthy: fig.Wall,
	})
}

func (s *scenario) hookFailsDuringScaleOut() {
	t := s.t
	const fault = "the hook answering 500, then timing out, during a scale-out 3→5"
	s.startFaultWriter("hook-failing")
	s.waitWrites(writesAround)
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())
	parent := ns + "/" + exampleName
	m0 := s.env.MC.Metrics(ns, exampleName)
	ops := func(m harness.Metrics) [4]int {
		return [4]int{m.ChildCreates, m.ChildUpdates, m.ChildDeletes, m.StatusUpdates}
	}
	nothingApplied := func(phase string) {
		t.Helper()
		if d := cmp.Diff(ops(m0), ops(s.env.MC.Metrics(ns, exampleName))); d != "" {
			t.Errorf("%s (%s): child creates, updates, deletes, status updates (-want +got):\n%s", fault, phase, d)
		}
		s.checkWorld(fault+" ("+phase+")", before, s.c.PodNames())
		s.checkNoMembershipChange(fault+" ("+phase+")", logged)
	}

	remove500 := s.env.Proxy.Inject(harness.Fault{Path: "/sync", Parent: parent, Status: 500, Body: "injected failure"})
	start := time.Now()
	s.patchSize(5)
	s.waitHookErrorsAfter(start, 3)
	nothingApplied("answering 500")
	failed500 := s.env.MC.Metrics(ns, exampleName).HookErrors - m0.HookErrors

	// One call held past Metacontroller's hook timeout: the proxy never
	// forwards it, since Metacontroller hangs up first.
	timeout := 10 * time.Second
	s.env.Proxy.Inject(harness.Fault{Path: "/sync", Parent: parent, Delay: timeout + 2*time.Second, Times: 1})
	faulted := s.env.Proxy.Faulted.Load()
	remove500()
	if err := s.env.WaitFor(10*time.Second, "a call held", func() (bool, string) {
		return s.env.Proxy.Faulted.Load() > faulted, ""
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(timeout - time.Second)
	nothingApplied("timing out")
	var timedOut harness.SyncRecord
	if err := s.env.WaitFor(timeout, "a timed-out call", func() (bool, string) {
		for _, r := range s.env.MC.Records(ns, exampleName) {
			if r.Start.After(start) && r.Err != nil && r.Duration >= timeout {
				timedOut = r
				return true, ""
			}
		}
		return false, ""
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d calls answered 500, then one timed out after %s: %v", fault, failed500, timedOut.Duration.Round(time.Millisecond), timedOut.Err)

	recovered, syncs := timedOut.Start.Add(timedOut.Duration), s.syncs()
	fig := s.converge(fault, recovered, syncs, 5)
	changes := s.loggedActions()[logged:]
	if d := cmp.Diff(map[string]int{"add": 2, "promote": 2}, CountActions(changes)); d != "" {
		t.Errorf("%s: membership changes (-want +got):\n%s\n%+v", fault, d, changes)
	}
	after := s.world(s.c.PodNames())
	for name, id := range before.Members {
		if after.Members[name] != id {
			t.Errorf("%s: member %s is %q, was %s", fault, name, after.Members[name], id)
		}
	}

	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "nothing applied while the hook fails (no child, status or membership change); once it answers, the scale-out completes with no stray member",
		Observed: fmt.Sprintf("%d calls answered 500 and 1 timed out after %s: no child, status or membership change meanwhile; then 2 adds and 2 promotes, 5 started voters, one Pod each",
			failed500, timedOut.Duration.Round(100*time.Millisecond)),
		Acked: fig.Acked, Lost: fig.Lost, Healthy: fig.Wall,
	})
}
