package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

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
