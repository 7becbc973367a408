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
