package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

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
