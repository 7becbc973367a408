package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// TestHibernateOnClaims: a cluster of 3 on claims, under a writer, is
// hibernated: every member Pod goes, never one running without a quorum
// (the last two together), and the claims, the Services and the status
// stay; the cluster is Ready (kstatus Current) and phase Hibernated.
// Woken, the same members come back on the same claims with the same IDs,
// with no membership change, and every acknowledged write is there.
func TestHibernateOnClaims(t *testing.T) {
	longTail(t, "the stop order is TestHibernateThroughFinalBackup's too (the same planner step), and waking on claims is the path of TestFaultAllPodsDeletedWithPVCs")
	s := newFaultScenario(t, harness.Options{})
	s.createSpec("hibernate: create, size 3, on claims", map[string]any{"size": 3, "version": faultVersion, "pod": map[string]any{
		"persistentVolumeClaimSpec": map[string]any{
			"accessModes": []any{"ReadWriteOnce"},
			"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
		},
	}})
	if t.Failed() {
		return
	}
	s.startFaultWriter("hibernate")
	s.waitWrites(writesAround)
	before := s.world(s.c.PodNames())
	claims := s.claimUIDs()
	logged := len(s.loggedActions())

	start := time.Now()
	s.mergeSpec(map[string]any{"hibernated": true})
	// The Pods go: the newest follower alone, then the last quorum (the
	// planner's order is proven by TestHibernateStopsMembersWithoutLosingQuorum
	// and FuzzPlan; Metacontroller deletes the two of one answer a moment
	// apart, so the running count seen here may pass 1 on the way).
	var seen []int
	st := s.waitParent(3*time.Minute, "hibernated: phase Hibernated, no member Pod", func(st ParentStatus) bool {
		running := 0
		for _, p := range s.c.Pods() {
			if !p.Terminating {
				running++
			}
		}
		if len(seen) == 0 || seen[len(seen)-1] != running {
			seen = append(seen, running)
		}
		ready, _ := st.Condition("Ready")
		return st.Phase == "Hibernated" && ready == "True" && len(s.c.Pods()) == 0
	})
	if t.Failed() {
		return
	}
	t.Logf("hibernated in %s; member Pods not terminating, as seen along the way: %v; %s", time.Since(start).Round(time.Second), seen, st.Reason)
	if stalled, _ := st.Condition("Stalled"); stalled != "False" {
		t.Errorf("hibernated: Stalled is %s, want False", stalled)
	}
	if d := cmp.Diff(claims, s.claimUIDs()); d != "" {
		t.Errorf("hibernated: the claims (name → UID) changed (-want +got):\n%s", d)
	}
	for _, svc := range []string{exampleName, exampleName + "-client"} {
		if _, ok := s.env.API.Get(harness.Ref{Type: harness.TypeService, Namespace: ns, Name: svc}); !ok {
			t.Errorf("hibernated: the Service %s is gone", svc)
		}
	}
	s.holdHibernated()

	start = time.Now()
	s.mergeSpec(map[string]any{"hibernated": false})
	s.waitParent(3*time.Minute, "woken: Ready with 3 members", func(st ParentStatus) bool {
		ready, _ := st.Condition("Ready")
		return ready == "True" && st.Phase == "Running" && st.ReadyMembers == 3
	})
	if t.Failed() {
		return
	}
	t.Logf("woken in %s", time.Since(start).Round(time.Second))
	after := s.world(s.c.PodNames())
	if d := cmp.Diff(before.Members, after.Members); d != "" {
		t.Errorf("woken: members (name → ID) (-want +got):\n%s", d)
	}
	if d := cmp.Diff(claims, s.claimUIDs()); d != "" {
		t.Errorf("woken: the claims (name → UID) changed (-want +got):\n%s", d)
	}
	for _, a := range s.loggedActions()[logged:] {
		if !strings.HasPrefix(a.Action, "move leadership") {
			t.Errorf("hibernation and waking changed the membership: %+v", a)
		}
	}
	for name := range after.Pods {
		s.checkRestartedFromData("woken", name)
	}
	s.verifyWrites("hibernated and woken")
}

// holdHibernated: a hibernated cluster stays so a while, whatever the
// resyncs.
func (s *scenario) holdHibernated() {
	s.t.Helper()
	time.Sleep(3 * time.Second)
	if n := len(s.c.Pods()); n != 0 {
		s.t.Errorf("hibernated: %d member Pods came back by themselves", n)
	}
}

// mergeSpec merge-patches the cluster's spec.
func (s *scenario) mergeSpec(patch map[string]any) {
	s.t.Helper()
	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, patch); err != nil {
		s.t.Fatal(err)
	}
}
