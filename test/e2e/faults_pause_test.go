package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// hookDownFor is long enough for Metacontroller's retries to back off to
// their cap several times over while the hook does not answer.
const hookDownFor = 20 * time.Second

// A paused cluster and a hook that is down must both leave a running
// cluster exactly as it is, and the hook must act on the spec as it finds
// it once it may again.
func TestFaultPausedAndHookDown(t *testing.T) {
	s := newFaultScenario(t, harness.Options{})
	s.create("setup", faultVersion, 3)
	s.paused()
	if t.Failed() {
		return
	}
	s.hookDown()
}

func (s *scenario) paused() {
	t := s.t
	const fault = "spec.paused set together with a scale-out 3→5, then unpaused"
	s.startFaultWriter("paused")
	s.waitWrites(writesAround)
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())

	s.setSpec(func(spec map[string]any) { spec["paused"], spec["size"] = true, 5 })
	st := s.waitParent(30*time.Second, "Progressing Paused", func(st ParentStatus) bool {
		prog, reason := st.Condition("Progressing")
		return prog == "False" && reason == "Paused"
	})
	if avail, _ := st.Condition("Available"); avail != "True" {
		t.Errorf("%s: Available = %s while paused, want True (status still reports)", fault, avail)
	}
	s.checkFrozen(fault, before, logged)

	s.setSpec(func(spec map[string]any) { delete(spec, "paused") })
	resumed, syncs := time.Now(), s.syncs()
	fig := s.converge(fault, resumed, syncs, 5)
	if d := cmp.Diff(map[string]int{"add": 2, "promote": 2}, CountActions(s.loggedActions()[logged:])); d != "" {
		t.Errorf("%s: membership changes after unpausing (-want +got):\n%s", fault, d)
	}
	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "Progressing False/Paused; every child kept and no membership change while paused; unpausing scales out",
		Observed: "Progressing False/Paused, Available True; no child created, updated or deleted, 0 membership changes while paused; after unpausing exactly 2 adds and 2 promotes",
		Acked:    fig.Acked, Lost: fig.Lost, Healthy: fig.Wall,
	})
}

func (s *scenario) hookDown() {
	t := s.t
	fault := fmt.Sprintf("the hook down for %s, with a scale-in 5→3 applied meanwhile, then back", hookDownFor)
	s.startFaultWriter("hook-down")
	s.waitWrites(writesAround)
	before := s.world(s.c.PodNames())
	logged := len(s.loggedActions())
	m0 := s.env.MC.Metrics(ns, exampleName)

	if err := s.env.Hook.Kill(); err != nil {
		t.Fatal(err)
	}
	s.patchSize(3)
	w := s.watchFault(hookDownFor, s.c.PodNames(), s.c.PodNames(), before.Pods, "/fault/hook-down/probe/")
	if len(w.Violations) > 0 || w.Served < w.Puts {
		t.Errorf("%s: while the hook was down, %d of %d puts served, Pods disturbed: %v", fault, w.Served, w.Puts, w.Violations)
	}
	m1 := s.env.MC.Metrics(ns, exampleName)
	ops := func(m harness.Metrics) [4]int {
		return [4]int{m.ChildCreates, m.ChildUpdates, m.ChildDeletes, m.StatusUpdates}
	}
	if d := cmp.Diff(ops(m0), ops(m1)); d != "" {
		t.Errorf("%s: child creates, updates, deletes, status updates while the hook was down (-want +got):\n%s", fault, d)
	}
	s.checkWorld(fault+" (down)", before, s.c.PodNames())
	s.checkNoMembershipChange(fault+" (down)", logged)

	if err := s.env.Hook.Restart(s.env.Ctx()); err != nil {
		t.Fatal(err)
	}
	back, syncs := time.Now(), s.syncs()
	fig := s.converge(fault, back, syncs, 3)
	if d := cmp.Diff(map[string]int{"remove": 2}, CountActions(s.loggedActions()[logged:])); d != "" {
		t.Errorf("%s: membership changes once the hook was back (-want +got):\n%s", fault, d)
	}
	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "nothing changes while the hook is down: Pods keep running and serving; once back, the hook scales in",
		Observed: fmt.Sprintf("%d/%d puts served while down; no child or status change, 0 membership changes; once back, exactly 2 removes", w.Served, w.Puts),
		Acked:    fig.Acked, Lost: fig.Lost, Healthy: fig.Wall,
	})
}
