package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

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
