package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// TestTakeOverCoreOSCluster: an EtcdCluster the CoreOS etcd-operator
// v0.9.4 ran, its objects exactly as that operator made them (harness
// CoreOSMemberPod and CoreOSServices, from its source): a seed, members
// added one by one with MemberAdd and a Pod each, under a writer. The
// operator stopped in the middle of a scale to 4: the fourth member is in
// etcd, its Pod never made. The user labels the objects with the
// EtcdCluster's UID, as docs/migrating.md says, and Metacontroller and the
// hook start.
//   - Mid-scale, the hook changes nothing, and says why (TakeoverWaiting).
//   - The scale finished by hand (the fourth Pod made as the operator would
//     have), the cluster is taken over as it is: Adopted, the same Pods
//     (UIDs, 0 restarts) and member IDs, no membership change.
//   - Then scaled by the hook to 5, the CoreOS members untouched.
//   - Then (the long tail) the rollout annotation moves every CoreOS member
//     onto the hook's own Pods, one at a time.
//
// Every acknowledged write is there at the end.
func TestTakeOverCoreOSCluster(t *testing.T) {
	s := newFaultScenario(t, harness.Options{})
	env := s.env
	coreos := newCoreOSCluster(s, map[string]any{"size": 4, "version": faultVersion}, nil)
	coreos.seed()
	coreos.grow(2)
	coreos.writeStatus(coreos.members)
	// Stopped while scaling to 4: the member is added, its Pod not made.
	unstarted := coreos.memberAdd()
	members := coreos.members

	s.startFaultWriter("coreos")
	s.waitWrites(writesAround)
	before := s.world(members[:3])
	logged := len(s.loggedActions())

	coreos.migrate()

	st := s.waitParent(time.Minute, "the takeover waits for the scale the CoreOS operator left", func(st ParentStatus) bool {
		adopted, reason := st.Condition("Adopted")
		return adopted == "False" && reason == "TakeoverWaiting"
	})
	if t.Failed() {
		return
	}
	if msg := st.ConditionMessage("Adopted"); !strings.Contains(msg, unstarted) {
		t.Errorf("TakeoverWaiting does not name the member never started (%s): %q", unstarted, msg)
	}
	if stalled, _ := st.Condition("Stalled"); stalled != "True" {
		t.Errorf("mid-scale: Stalled is %s, want True (a person finishes the scale)", stalled)
	}
	time.Sleep(5 * time.Second)
	s.checkWorld("mid-scale: the hook waits", before, members[:3])
	if n := len(s.c.Pods()); n != 3 {
		t.Errorf("mid-scale: %d member Pods, want the CoreOS operator's 3", n)
	}

	// Finished by hand, as the operator would have: the fourth Pod.
	coreos.pod(unstarted, "existing", "")
	before = s.world(members)
	if !coreos.waitTakenOver(before, logged) {
		return
	}

	// Scaled by the hook, the CoreOS members untouched.
	if _, err := env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"size": 5}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.c.WaitConverged(convergeTimeout, 5); err != nil {
		t.Fatal(err)
	}
	after := s.world(s.c.PodNames())
	for _, m := range members {
		if after.Pods[m] != before.Pods[m] || after.Members[m] != before.Members[m] {
			t.Errorf("scaled to 5: CoreOS member %s changed (Pod %s → %s, ID %s → %s)", m, before.Pods[m], after.Pods[m], before.Members[m], after.Members[m])
		}
	}
	t.Logf("scaled to 5: %s", strings.Join(s.c.PodNames(), ", "))

	// The move onto the hook's Pods, when the user asks for it.
	if !testing.Short() && !coreos.moveToHookPods(5) {
		return
	}
	s.verifyWrites(fmt.Sprintf("the CoreOS cluster taken over (%d members)", len(s.c.PodNames())))
}

func uidOf(obj harness.Object) string {
	md, _ := obj["metadata"].(map[string]any)
	uid, _ := md["uid"].(string)
	return uid
}
