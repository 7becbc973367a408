package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// The promise behind AllMembersLost: a cluster that ran is never
// bootstrapped again as a new, empty cluster under the same name. Clients
// would reconnect to it and find their data, and revisions, silently gone.

const (
	// recreateAnnotation is the way out the status names.
	recreateAnnotation = "etcd.database.coreos.com/recreate-empty"
	sentinelKey        = "/lost/sentinel"
)

// lostWatch watches a cluster that lost every member: no Pod of it may
// appear, and nothing may serve through its client Service.
type lostWatch struct {
	s      *scenario
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	polls      int
	puts       int
	violations []string
	seen       map[string]bool // Pods seen, by name
}

func (s *scenario) watchLost() *lostWatch {
	ctx, cancel := context.WithCancel(s.env.Ctx())
	w := &lostWatch{s: s, cancel: cancel, done: make(chan struct{}), seen: map[string]bool{}}
	go w.run(ctx)
	return w
}

func (w *lostWatch) violation(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) < 20 {
		w.violations = append(w.violations, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

func (w *lostWatch) run(ctx context.Context) {
	defer close(w.done)
	cli, err := NewClient(w.s.c.ServiceURL())
	if err != nil {
		w.violation("client: %v", err)
		return
	}
	defer cli.Close()
	for n := 0; ctx.Err() == nil; n++ {
		for _, p := range w.s.c.Pods() {
			w.mu.Lock()
			fresh := !w.seen[p.Name]
			w.seen[p.Name] = true
			w.mu.Unlock()
			if fresh {
				w.violation("a Pod of the lost cluster appeared: %s (phase %q)", p.Name, w.s.c.PodPhase(p.Name))
			}
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := cli.Put(pctx, fmt.Sprintf("/lost/probe/%06d", n), "x")
		cancel()
		if err == nil {
			w.violation("a put through the client Service was acknowledged")
		}
		gctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		resp, err := cli.Get(gctx, sentinelKey)
		cancel()
		if err == nil {
			w.violation("a read through the client Service was served: %d keys for %s", len(resp.Kvs), sentinelKey)
		}
		w.mu.Lock()
		w.polls++
		w.puts++
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (w *lostWatch) stop() (polls int, violations []string) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls, w.violations
}

// clusterID is etcd's cluster ID, as the hook records it (hex).
func (s *scenario) clusterID() string {
	s.t.Helper()
	cli, err := NewClient(s.c.MemberURLs()...)
	if err != nil {
		s.t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(s.env.Ctx(), 5*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return strconv.FormatUint(resp.Header.ClusterId, 16)
}

func isAllMembersLost(st ParentStatus) bool {
	avail, ar := st.Condition("Available")
	deg, dr := st.Condition("Degraded")
	return st.Phase == "Failed" && avail == "False" && ar == "AllMembersLost" && deg == "True" && dr == "AllMembersLost"
}

// restartHook kills the hook and starts it again.
func (s *scenario) restartHook() {
	s.t.Helper()
	if err := s.env.Hook.Kill(); err != nil {
		s.t.Fatal(err)
	}
	if err := s.env.Hook.Restart(s.env.Ctx()); err != nil {
		s.t.Fatal(err)
	}
}

// waitAnsweredAfter waits for a sync answered with 200 that began after t0.
func (s *scenario) waitAnsweredAfter(t0 time.Time) {
	s.t.Helper()
	err := s.env.WaitFor(20*time.Second, "a sync answered after "+t0.Format("15:04:05.000"), func() (bool, string) {
		for _, r := range s.env.MC.Records(ns, exampleName) {
			if r.Start.After(t0) && r.HTTPStatus == 200 && !r.Finalizing {
				return true, ""
			}
		}
		return false, "none yet"
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// deleteAll deletes every member Pod at once and waits until they are gone.
func (s *scenario) deleteAll() time.Time {
	s.t.Helper()
	names := s.c.PodNames()
	at := time.Now()
	for _, n := range names {
		if err := s.env.DeletePod(ns, n); err != nil {
			s.t.Fatal(err)
		}
	}
	for _, n := range names {
		if err := s.env.WaitPodGone(ns, n, 60*time.Second); err != nil {
			s.t.Fatal(err)
		}
	}
	return at
}

// TestAllMembersLost: every member Pod of a cluster on emptyDir deleted at
// once, with a writer running. Then the same while Metacontroller's status
// writes are lost and the hook is restarted after its first answer; then
// the explicit re-creation.
func TestAllMembersLost(t *testing.T) {
	s := newFaultScenario(t, harness.Options{})
	s.create("setup", faultVersion, 3)
	s.cacheShowsNothing()
	if t.Failed() {
		return
	}
	const fault = "all 3 Pods deleted at once (emptyDir), hook restarted, status writes lost"

	s.startFaultWriter("all-lost")
	s.waitWrites(writesAround)
	if err := PutVia(s.env.Ctx(), s.c.MemberURLs(), sentinelKey, "written before the loss", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	lostID := s.clusterID()
	_, before, _ := s.c.Parent()
	if before.Bootstrap.ClusterID != lostID || !before.Bootstrap.Bootstrapped {
		t.Fatalf("status.bootstrap = %+v before the loss, want bootstrapped with cluster ID %s", before.Bootstrap, lostID)
	}
	seed := before.Bootstrap.SeedMember
	// The checker's history ends here, checked whole on the healthy
	// cluster: across a loss accepted on purpose (recreate-empty below) no
	// history is linearizable, and its clients would go on into the new,
	// empty cluster.
	s.checkHistory(true)

	// The first syncs after the loss: their status is never written, and
	// the hook dies after answering the first of them. What the next hook
	// reads is the status of a running cluster, and no Pod.
	s.env.MC.DropStatusWrites(ns, exampleName, true)
	deletedAt := s.deleteAll()
	watch := s.watchLost()
	ackedAtLoss := s.w.Acked()
	// A sync that began once every Pod was gone. The one the last
	// deletion set off may have begun before deleteAll saw them all gone,
	// and the next would wait for a resync: ask for one now. (With a
	// client's watch open, a member takes longer to stop, and that race
	// was lost: the scenario waited 20 s for a sync that was not due.)
	lostAt := time.Now()
	s.env.MC.Enqueue(ns, exampleName)
	s.waitAnsweredAfter(lostAt)
	s.restartHook()
	time.Sleep(lostHold() / 3)
	_, unwritten, _ := s.c.Parent()
	if unwritten.Phase != "Running" {
		t.Errorf("%s: status writes were dropped, yet the status reads %s", fault, describeStatus(unwritten))
	}
	dropped := s.env.MC.Metrics(ns, exampleName).StatusDropped

	// Status writes resume: the loss is reported, and still no seed, across
	// another hook restart.
	s.env.MC.DropStatusWrites(ns, exampleName, false)
	resumedAt := time.Now()
	s.waitParent(30*time.Second, "AllMembersLost", isAllMembersLost)
	reported := time.Since(resumedAt)
	s.restartHook()
	if rest := lostHold() - time.Since(deletedAt); rest > 0 {
		time.Sleep(rest)
	}
	polls, violations := watch.stop()
	held := time.Since(deletedAt)
	if len(violations) > 0 {
		t.Errorf("%s: %d violations while lost:\n%s", fault, len(violations), strings.Join(violations, "\n"))
	}
	// A probe waits out its timeouts against a Service with no endpoint.
	if polls < int(lostHold()/(2*time.Second)) {
		t.Errorf("%s: only %d probes in %s", fault, polls, held)
	}
	if acked := s.w.Acked(); acked != ackedAtLoss {
		t.Errorf("%s: the writer had %d puts acknowledged after every Pod was gone", fault, acked-ackedAtLoss)
	}
	_, st, _ := s.c.Parent()
	if !isAllMembersLost(st) {
		t.Errorf("%s: status after %s: %s, want AllMembersLost", fault, held.Round(time.Second), describeStatus(st))
	}
	msg := st.ConditionMessage("Degraded")
	for _, want := range []string{lostID, seed, recreateAnnotation + "=" + seed, "backup"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: the Degraded message does not name %q: %q", fault, want, msg)
		}
	}
	if st.Size != 0 || st.ReadyMembers != 0 {
		t.Errorf("%s: status size %d, ready %d, want 0", fault, st.Size, st.ReadyMembers)
	}
	if st.Bootstrap.ClusterID != lostID || st.Bootstrap.SeedMember != seed {
		t.Errorf("%s: status.bootstrap = %+v, want the lost cluster's record (%s, %s)", fault, st.Bootstrap, lostID, seed)
	}
	s.checkServicesKept(fault)

	observed := fmt.Sprintf("%d status writes dropped over %s, the hook restarted after its first answer: the status still read Running, no seed; writes resumed: AllMembersLost %s later; hook restarted again; held %s in all: no Pod, %d probes through the client Service, none served, the writer acknowledged 0 puts after the loss",
		dropped, lostHold()/3, reported.Round(100*time.Millisecond), held.Round(time.Second), polls)
	report := func(healthy string) {
		ReportFailure(t, Failure{
			Fault:       fault,
			Expected:    "no new seed; no put or read served by a new cluster; status AllMembersLost naming the cluster and the way out; Services and PDB kept; the recreate-empty annotation starts an empty cluster",
			Observed:    observed,
			Acked:       ackedAtLoss,
			HealthyNote: healthy,
		})
	}
	s.w.Stop()
	if t.Failed() {
		report("not reached")
		return
	}
	took := s.recreateEmpty(seed, lostID)
	report(fmt.Sprintf("not by itself, by design; an empty cluster %s after the recreate-empty annotation", round(took)))
}

// checkServicesKept: the lost cluster's Services and PDB stay.
func (s *scenario) checkServicesKept(fault string) {
	s.t.Helper()
	for _, ref := range []harness.Ref{
		{Type: harness.TypeService, Namespace: ns, Name: exampleName},
		{Type: harness.TypeService, Namespace: ns, Name: exampleName + "-client"},
		{Type: harness.TypePDB, Namespace: ns, Name: exampleName},
	} {
		if _, ok := s.env.API.Get(ref); !ok {
			s.t.Errorf("%s: %s is gone", fault, ref)
		}
	}
}

// recreateEmpty accepts the loss with the annotation the status names: a
// new, empty cluster under a new ID converges, the record says what it
// replaced, and the annotation left in place changes nothing more.
func (s *scenario) recreateEmpty(lostSeed, lostID string) time.Duration {
	t := s.t
	const step = "recreate-empty annotation after AllMembersLost"
	start := time.Now()
	if _, err := s.env.MC.AnnotateParent(ns, exampleName, recreateAnnotation, lostSeed); err != nil {
		t.Fatal(err)
	}
	at, members, err := s.c.WaitConverged(convergeTimeout, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: converged in %s: %s", step, at.Sub(start).Round(time.Millisecond), members)
	newID := s.clusterID()
	if newID == lostID {
		t.Errorf("%s: the new cluster has the lost one's ID %s", step, lostID)
	}
	if _, ok, err := LocalGet(s.env.Ctx(), s.c.MemberURL(s.leader()), sentinelKey); err != nil || ok {
		t.Errorf("%s: the new cluster is not empty: %s present %v (%v)", step, sentinelKey, ok, err)
	}
	_, st, _ := s.c.Parent()
	if b := st.Bootstrap; b.RecreatedFrom != lostSeed || b.SeedMember == lostSeed || !b.Bootstrapped || b.ClusterID != newID {
		t.Errorf("%s: status.bootstrap = %+v, want a new seed, recreated from %s, cluster ID %s", step, b, lostSeed, newID)
	}
	s.startWriter("recreated")
	s.waitWrites(writesAround)
	s.verifyWrites(step)
	// The annotation stays, naming the lost cluster: it accepts nothing more.
	time.Sleep(5 * time.Second)
	if ok, why := s.c.Converged(s.env.Ctx(), 3); !ok {
		t.Errorf("%s: with the annotation left in place the cluster no longer converges: %s", step, why)
	}
	if _, after, _ := s.c.Parent(); after.Bootstrap != st.Bootstrap {
		t.Errorf("%s: status.bootstrap moved from %+v to %+v", step, st.Bootstrap, after.Bootstrap)
	}
	return at.Sub(start)
}

// TestAllPodsAndClaimsDeleted: every Pod deleted with its PVC, on a
// cluster whose data is on PVCs. The claims go when their Pods do, and
// with them the data: the same refusal as on emptyDir.
func TestAllPodsAndClaimsDeleted(t *testing.T) {
	longTail(t, "no silent re-bootstrap is TestAllMembersLost")
	s := newFaultScenario(t, harness.Options{})
	s.createSpec("setup (PVCs)", map[string]any{"size": 3, "version": faultVersion, "pod": map[string]any{
		"persistentVolumeClaimSpec": map[string]any{
			"accessModes": []any{"ReadWriteOnce"},
			"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
		},
	}})
	const fault = "all 3 Pods and their PVCs deleted at once"
	s.startFaultWriter("claims-deleted")
	s.waitWrites(writesAround)
	lostID := s.clusterID()
	claims := s.claimUIDs()
	names := s.c.PodNames()
	s.checkHistory(true)
	deletedAt := time.Now()
	for name, uid := range claims {
		if err := s.env.API.Delete(harness.Ref{Type: harness.TypePVC, Namespace: ns, Name: name}, uid); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		if err := s.env.DeletePod(ns, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.env.WaitFor(60*time.Second, "every Pod and PVC gone", func() (bool, string) {
		left := len(s.c.Pods()) + len(s.claimUIDs())
		return left == 0, fmt.Sprintf("%d Pods %v, PVCs %v", len(s.c.Pods()), s.c.PodNames(), s.claimUIDs())
	}); err != nil {
		t.Fatal(err)
	}
	ackedAtLoss := s.w.Acked()
	watch := s.watchLost()
	s.waitParent(30*time.Second, "AllMembersLost", isAllMembersLost)
	reported := time.Since(deletedAt)
	if rest := lostHold() - time.Since(deletedAt); rest > 0 {
		time.Sleep(rest)
	}
	polls, violations := watch.stop()
	if len(violations) > 0 {
		t.Errorf("%s: %d violations while lost:\n%s", fault, len(violations), strings.Join(violations, "\n"))
	}
	if n := len(s.claimUIDs()); n != 0 {
		t.Errorf("%s: %d PVCs came back: %v", fault, n, s.claimUIDs())
	}
	if acked := s.w.Acked(); acked != ackedAtLoss {
		t.Errorf("%s: %d puts acknowledged after every Pod and PVC was gone", fault, acked-ackedAtLoss)
	}
	_, st, _ := s.c.Parent()
	if !isAllMembersLost(st) || st.Bootstrap.ClusterID != lostID {
		t.Errorf("%s: status %s, bootstrap %+v: want AllMembersLost of cluster %s", fault, describeStatus(st), st.Bootstrap, lostID)
	}
	if msg := st.ConditionMessage("Degraded"); !strings.Contains(msg, "PVC") {
		t.Errorf("%s: the message does not say the PVCs are gone: %q", fault, msg)
	}
	s.checkServicesKept(fault)
	ReportFailure(t, Failure{
		Fault:    fault,
		Expected: "as on emptyDir: no new seed, no PVC recreated, nothing served, status AllMembersLost",
		Observed: fmt.Sprintf("AllMembersLost %s after the deletion; held %s: no new Pod, no PVC, %d probes through the client Service, none served",
			reported.Round(100*time.Millisecond), time.Since(deletedAt).Round(time.Second), polls),
		Acked: ackedAtLoss, HealthyNote: "not by itself, by design (restore, or recreate-empty)",
	})
	s.w.Stop()
}

// cacheShowsNothing: for a few syncs Metacontroller's requests show no
// child at all, as an informer cache that has not caught up would. The
// hook must start nothing and declare nothing lost; the Pods stay.
func (s *scenario) cacheShowsNothing() {
	t := s.t
	const fault = "Metacontroller's requests show no child at all for 8 s (a cache behind)"
	pods := s.podUIDs()
	logged := len(s.loggedActions())
	s.env.MC.HideChildren(ns, exampleName, true)
	hiddenAt := time.Now()
	// Hiding the children is no event: a converged cluster is synced next
	// at its resync, minutes away, unless something else changes. Ask for
	// a sync now, as lostAt's does below (the scenario waited 20 s for
	// one that was not due).
	s.env.MC.Enqueue(ns, exampleName)
	s.waitAnsweredAfter(hiddenAt)
	var statuses []string
	for time.Since(hiddenAt) < 8*time.Second {
		if _, st, ok := s.c.Parent(); ok {
			if _, reason := st.Condition("Available"); !slices.Contains(statuses, reason) {
				statuses = append(statuses, reason)
			}
			if isAllMembersLost(st) {
				t.Errorf("%s: status says AllMembersLost: %s", fault, describeStatus(st))
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.env.MC.HideChildren(ns, exampleName, false)
	if d := cmp.Diff(pods, s.podUIDs()); d != "" {
		t.Errorf("%s: Pods (name → UID) changed (-before +after):\n%s", fault, d)
	}
	// Creating the Services, the PDB and the fence it could not see
	// finds them existing, which Metacontroller logs and skips (counted
	// in ChildCreatesExisting); any error here can only be of those.
	for _, e := range s.env.MC.TakeApplyErrors() {
		if e.Op != "create" || (e.Child.Type != harness.TypeService && e.Child.Type != harness.TypePDB && e.Child.Type != harness.TypeNetPolicy) {
			t.Errorf("%s: unexpected apply error: %v", fault, e)
		}
	}
	start := time.Now()
	at, _, err := s.c.WaitConverged(convergeTimeout, 3)
	if err != nil {
		t.Fatal(err)
	}
	s.checkNoMembershipChange(fault, logged)
	ReportFailure(t, Failure{
		Fault:       fault,
		Expected:    "no Pod started or deleted, nothing declared lost; back to Running once the children show again",
		Observed:    fmt.Sprintf("Available reasons while hidden: %v; Pods unchanged (same UIDs), 0 membership changes; converged %s after the children showed again", statuses, round(at.Sub(start))),
		Undisturbed: true,
	})
}

// lostHold is how long a lost cluster is watched for a new seed: longer
// than a dozen of the hook's resyncs in trouble (5 s) and a hook restart.
// make test (-short) watches for half as long, still six resyncs; make
// test-full for the whole minute.
func lostHold() time.Duration {
	if testing.Short() {
		return 30 * time.Second
	}
	return time.Minute
}
