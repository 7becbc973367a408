package e2e

import (
	"context"
	"fmt"
	"slices"
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
	// Metacontroller is installed after the CoreOS cluster exists.
	env.MC.Stop()
	parent, err := env.MC.CreateParent(ns, exampleName, map[string]any{"size": 4, "version": faultVersion})
	if err != nil {
		t.Fatal(err)
	}
	owner := harness.CoreOSOwnerRef(parent)
	for _, svc := range harness.CoreOSServices(exampleName, ns, owner) {
		if _, err := env.API.Create(svc); err != nil {
			t.Fatal(err)
		}
	}
	members := []string{harness.CoreOSMemberName(exampleName)}
	labelled := false
	coreosPod := func(member, state, token string) {
		t.Helper()
		var pairs []string
		for _, m := range members {
			pairs = append(pairs, harness.CoreOSPeerURLPair(ns, m))
		}
		pod := harness.CoreOSMemberPod(exampleName, ns, member, faultVersion, pairs, state, token, owner, "")
		if labelled {
			// Made once the migration began: labelled as the others.
			pod["metadata"].(map[string]any)["labels"].(map[string]any)[harness.LabelControllerUID] = uidOf(parent)
		}
		if _, err := env.API.Create(pod); err != nil {
			t.Fatal(err)
		}
		if _, err := env.WaitPodReady(ns, member, 90*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	coreosPod(members[0], "new", "coreos-token")
	memberAdd := func() string {
		t.Helper()
		m := harness.CoreOSMemberName(exampleName)
		cli, err := NewClient(harness.CoreOSClientURL(ns, members[0]))
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		// etcd refuses a member while a peer joined within its health
		// interval ("unhealthy cluster"); the operator retried too.
		err = env.WaitFor(30*time.Second, "MemberAdd "+m, func() (bool, string) {
			ctx, cancel := context.WithTimeout(env.Ctx(), 5*time.Second)
			defer cancel()
			_, err := cli.MemberAdd(ctx, []string{harness.CoreOSPeerURL(ns, m)})
			if err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
		return m
	}
	for range 2 {
		coreosPod(memberAdd(), "existing", "")
	}
	// The operator's status, as it wrote it.
	if _, err := env.API.UpdateStatus(harness.Ref{Type: harness.TypeEtcdCluster, Namespace: ns, Name: exampleName}, uidOf(parent), map[string]any{
		"phase": "Running", "size": 3, "serviceName": exampleName + "-client", "clientPort": 2379, "currentVersion": faultVersion,
		"members":    map[string]any{"ready": members},
		"conditions": []any{map[string]any{"type": "Available", "status": "True", "reason": "Cluster available"}},
	}); err != nil {
		t.Fatal(err)
	}
	// Stopped while scaling to 4: the member is added, its Pod not made.
	unstarted := memberAdd()

	s.startFaultWriter("coreos")
	s.waitWrites(writesAround)
	before := s.world(members[:3])
	logged := len(s.loggedActions())

	// The migration's step: the objects labelled as the EtcdCluster's
	// children; then Metacontroller (and so the hook) starts.
	uid := uidOf(parent)
	for _, typ := range []string{harness.TypePod, harness.TypeService} {
		for _, obj := range env.API.List(typ, ns) {
			ref := harness.RefOf(obj)
			if _, err := env.API.Mutate(ref, func(o harness.Object) error {
				md, _ := o["metadata"].(map[string]any)
				labels, _ := md["labels"].(map[string]any)
				if labels == nil {
					labels = map[string]any{}
					md["labels"] = labels
				}
				labels[harness.LabelControllerUID] = uid
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	env.MC.Start(env.Ctx())

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
	labelled = true
	coreosPod(unstarted, "existing", "")
	before = s.world(members)
	start := time.Now()
	st = s.waitParent(time.Minute, "taken over: Adopted, Ready at 4", func(st ParentStatus) bool {
		adopted, _ := st.Condition("Adopted")
		ready, _ := st.Condition("Ready")
		return adopted == "True" && ready == "True" && st.ReadyMembers == 4
	})
	if t.Failed() {
		return
	}
	t.Logf("taken over in %s: %s", time.Since(start).Round(100*time.Millisecond), st.ConditionMessage("Adopted"))
	s.checkWorld("taken over", before, members)
	for _, p := range s.c.Pods() {
		if p.Restarts != 0 {
			t.Errorf("taken over: member %s restarted %d times", p.Name, p.Restarts)
		}
	}
	for _, a := range s.loggedActions()[logged:] {
		t.Errorf("the takeover changed the membership: %+v", a)
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

	if !testing.Short() {
		// The move onto the hook's Pods, when the user asks for it.
		if _, err := env.MC.AnnotateParent(ns, exampleName, "etcd.database.coreos.com/rollout", "moved"); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		s.waitParent(5*time.Minute, "every member on the hook's Pods: no Adopted condition, Ready at 5", func(st ParentStatus) bool {
			adopted, _ := st.Condition("Adopted")
			ready, _ := st.Condition("Ready")
			names := s.c.PodNames()
			return adopted == "" && ready == "True" && st.ReadyMembers == 5 && len(names) == 5 && !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(members, n) })
		})
		if t.Failed() {
			return
		}
		t.Logf("moved onto the hook's Pods in %s: %s", time.Since(start).Round(100*time.Millisecond), strings.Join(s.c.PodNames(), ", "))
	}
	s.verifyWrites(fmt.Sprintf("the CoreOS cluster taken over (%d members)", len(s.c.PodNames())))
}

func uidOf(obj harness.Object) string {
	md, _ := obj["metadata"].(map[string]any)
	uid, _ := md["uid"].(string)
	return uid
}
