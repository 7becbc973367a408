package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// A restore beside other EtcdBackups, as reported from Metacontroller
// v4.17.2: an EtcdRestore stayed Succeeded=Unknown, reason Verifying, for
// good, although the cluster ran on the restored data. Metacontroller
// syncs a parent from its informer cache, which may not yet hold the
// status the previous sync wrote, and writes the status the hook
// computed from it over the newer one (AtomicStatusUpdate). The EtcdCluster's
// customize hook relates every EtcdBackup of the namespace, so their
// changes add cluster syncs, and one on the parent from before the
// restore's commit wrote Verifying back after it. The harness's
// Metacontroller serves the EtcdCluster's syncs through such a lagging
// cache here (ControllerConfig.ParentCacheLag), and the store takes a
// few seconds to hand the backup to the restore's fetch, as a real one
// does: on a cluster, Verifying lasts seconds and the cache lags by
// milliseconds; here the lag is exaggerated to make the window certain,
// and Verifying outlasts it.

const (
	// restoreParentCacheLag is the lag of the EtcdCluster controller's
	// parent cache: longer than the gap between the commit sync and the
	// syncs its child changes cause, so that one of these sees the parent
	// from before the commit.
	restoreParentCacheLag = time.Second
	// restoreRoundsEnv sets the number of backup-then-restore rounds [2].
	restoreRoundsEnv = "E2E_RESTORE_ROUNDS"
	// restoreLagEnv overrides restoreParentCacheLag (a Go duration; 0
	// turns the lag off).
	restoreLagEnv = "E2E_RESTORE_CACHE_LAG"
	// restoreDoneWithin bounds a round's restore, from the EtcdRestore to
	// its Succeeded=True.
	restoreDoneWithin = 3 * time.Minute
	// verifyingGrace is how long status.restore may still say Verifying
	// once the restored cluster's members run: a few syncs.
	verifyingGrace = 20 * time.Second
	// fetchDelay is how long the store takes to answer a read of a
	// round's backup: longer than restoreParentCacheLag, so that the
	// cluster's parent is Verifying in the cache when the restore commits.
	fetchDelay = 2 * time.Second
)

// TestRestoreBesideRelatedBackups: a periodic EtcdBackup that ran and is
// deleted mid-way, and one that fails on a wrong secret key, beside a
// one-shot EtcdBackup that an EtcdRestore then restores over the running
// cluster, with the cluster controller's parent cache lagging; several
// rounds in a row, each with a backup at a new location and a new
// EtcdRestore. Each restore must reach Succeeded=True with the cluster's
// status.restore Completed, never sit at Verifying while the members run
// on the restored data, and bring back every write acknowledged up to its
// revision.
func TestRestoreBesideRelatedBackups(t *testing.T) {
	// Two rounds: the second restores over a cluster a restore made.
	// make test (-short) runs one.
	rounds := 2
	if testing.Short() {
		rounds = 1
	}
	if v := os.Getenv(restoreRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", restoreRoundsEnv, v)
		}
		rounds = n
	}
	lag := restoreParentCacheLag
	if v := os.Getenv(restoreLagEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("%s=%q: want a duration", restoreLagEnv, v)
		}
		lag = d
	}
	opts := harness.Options{Backups: true, Restores: true, ClusterCustomize: true,
		Controller: harness.ControllerConfig{ParentCacheLag: lag}}
	if rounds > 6 {
		opts.Lifetime = 5*time.Minute + time.Duration(rounds)*2*time.Minute
	}
	s := newFaultScenario(t, opts)
	s.create("setup", faultVersion, 3)
	if t.Failed() {
		return
	}
	b := newBackupScenario(s)
	b.createSecret("aws-wrong", s3test.AccessKey, "not-the-secret")
	slow := slowStore(t, b.s3.URL, "/rounds/", fetchDelay)

	// Failing all along: the wrong secret key.
	b.createBackup("wrong-key", b.s3Spec("wrong/etcd.backup", "aws-wrong"), nil)
	b.waitBackup("wrong-key", 60*time.Second, "failed on the credentials", func(st BackupStatus) bool {
		return !st.Succeeded && strings.Contains(st.Reason, "refused the credentials")
	})

	// What earlier rounds restored must survive the later ones.
	type restored struct {
		w   *Writer
		rev int64
	}
	var earlier []restored
	for round := 1; round <= rounds; round++ {
		w, rev, took := b.restoreRound(round, slow)
		if t.Failed() {
			return
		}
		cli, err := NewClient(b.c.ServiceURL())
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range earlier {
			if want, missing := ackedMissing(t, cli, e.w, e.rev); len(missing) > 0 {
				t.Errorf("round %d: %d of the %d writes of round %d (restored at revision %d) are gone: %v", round, len(missing), len(want), i+1, e.rev, missing[:min(len(missing), 5)])
			}
		}
		_ = cli.Close()
		earlier = append(earlier, restored{w, rev})
		t.Logf("round %d of %d: done in %s", round, rounds, took.Round(100*time.Millisecond))
	}
}

// restoreRound is one round: a writer, a periodic EtcdBackup that runs
// and is deleted, a one-shot backup at a new location, then an EtcdRestore
// of it over the running cluster, the backup stored through the slow
// endpoint store. It returns the round's writer, stopped, and the
// revision restored.
func (b *backupScenario) restoreRound(round int, store string) (*Writer, int64, time.Duration) {
	t := b.t
	s := b.scenario
	roundStart := time.Now()
	s.startFaultWriter(fmt.Sprintf("round-%d", round))
	w := s.w
	s.waitWrites(writesAround)

	// A periodic backup that runs at least once, then the one-shot.
	periodic := fmt.Sprintf("periodic-%d", round)
	b.createBackup(periodic, b.s3Spec(fmt.Sprintf("periodic/%d/etcd.backup", round), "aws"), map[string]any{"backupIntervalInSecond": 5, "maxBackups": 2})
	b.waitBackup(periodic, 60*time.Second, "a successful run", func(st BackupStatus) bool {
		return st.LastRun != nil && st.LastRun.Succeeded && st.LastBackup != nil
	})
	oneshot := fmt.Sprintf("round-%d", round)
	spec := b.s3Spec(fmt.Sprintf("rounds/%d/etcd.backup", round), "aws")
	spec["endpoint"] = store
	b.createBackup(oneshot, spec, nil)
	backup := b.waitBackup(oneshot, 60*time.Second, "succeeded", func(st BackupStatus) bool { return st.Succeeded && st.LastBackup != nil })
	s.waitWrites(writesAround)

	// The periodic one deleted mid-way (it runs every 5 s), before the
	// restore.
	if err := b.env.BackupMC.DeleteParent(ns, periodic); err != nil {
		t.Fatal(err)
	}
	if err := b.env.WaitFor(60*time.Second, "EtcdBackup "+periodic+" gone", func() (bool, string) {
		obj, ok := b.env.BackupMC.Parent(ns, periodic)
		return !ok, fmt.Sprint(obj["status"])
	}); err != nil {
		t.Fatal(err)
	}

	before := map[string]bool{}
	for _, name := range b.c.PodNames() {
		before[name] = true
	}
	// Histories are linearizable between restores, not across one: the
	// checker's is checked whole before this restore.
	s.checkHistory(true)
	start := time.Now()
	b.applyRestore(exampleName, map[string]any{"etcdCluster": map[string]any{"name": exampleName}, "backup": map[string]any{"name": oneshot}})
	obj, ok := b.env.RestoreMC.Parent(ns, exampleName)
	if !ok {
		t.Fatal("the EtcdRestore is gone")
	}
	request := "EtcdRestore/" + harnessString(obj, "metadata", "uid")

	var v restoreView
	var cond, reason string
	var runningAt, verifiedAt time.Time
	var running, seed string
	for {
		if verifiedAt.IsZero() {
			seed, verifiedAt = b.seedVerified(request)
		}
		if !verifiedAt.IsZero() && time.Since(verifiedAt) > verifyingGrace && !b.committed(request) {
			v = b.restoreView(exampleName)
			t.Fatalf("round %d: the seed %s verified the backup %s ago and the restore is not committed: members %v, cluster status.restore %+v",
				round, seed, time.Since(verifiedAt).Round(time.Second), b.c.PodNames(), v.Cluster.Restore)
		}
		if runningAt.IsZero() {
			if ok, detail := b.runningRestored(request, before); ok {
				runningAt, running = time.Now(), detail
			}
		}
		v = b.restoreView(exampleName)
		cond, reason = restoreCondition(b.env)
		if v.Cluster.Restore.Request == request && v.Cluster.Restore.Phase == "Completed" && v.Object.Succeeded && cond == "True" {
			break
		}
		if !runningAt.IsZero() && time.Since(runningAt) > verifyingGrace && v.Cluster.Restore.Phase == "Verifying" {
			stale, answered := b.staleAfterCommit(request)
			t.Fatalf("round %d: the cluster's members have run on the restored data for %s (%s), and status.restore is still Verifying: %+v; the EtcdRestore says succeeded=%v, Succeeded=%s reason %s, phase %s; %d syncs after the commit were sent status.restore Verifying, answered with phases %v",
				round, time.Since(runningAt).Round(time.Second), running, v.Cluster.Restore, v.Object.Succeeded, cond, reason, v.Object.Phase, stale, answered)
		}
		if time.Since(start) > restoreDoneWithin {
			t.Fatalf("round %d: the EtcdRestore is not Succeeded=True %s after it was applied (members running on the restored data: %v): cluster status.restore %+v; EtcdRestore succeeded=%v, Succeeded=%s reason %s, phase %s",
				round, restoreDoneWithin, !runningAt.IsZero(), v.Cluster.Restore, v.Object.Succeeded, cond, reason, v.Object.Phase)
		}
		if b.env.Ctx().Err() != nil {
			t.Fatal(b.env.Ctx().Err())
		}
		time.Sleep(250 * time.Millisecond)
	}
	took := time.Since(start)
	if _, _, err := b.c.WaitConverged(convergeTimeout, 3); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	for _, name := range b.c.PodNames() {
		if before[name] {
			t.Errorf("round %d: member %s of the cluster before the restore is still there", round, name)
		}
	}

	// Every write acknowledged up to the restored revision is there.
	rev := v.Cluster.Restore.Revision
	if rev < backup.EtcdRevision || v.Object.Revision != rev {
		t.Errorf("round %d: restored revision %d (EtcdRestore %d), want at least the backup's %d", round, rev, v.Object.Revision, backup.EtcdRevision)
	}
	w.Stop()
	cli, err := NewClient(b.c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	want, missing := ackedMissing(t, cli, w, rev)
	if len(want) == 0 || len(missing) > 0 {
		t.Errorf("round %d: %d writes acknowledged up to revision %d, %d missing: %v", round, len(want), rev, len(missing), missing[:min(len(missing), 5)])
	}
	stale, answered := b.staleAfterCommit(request)
	t.Logf("round %d: restored %s at revision %d: EtcdRestore Succeeded=True %s after it was applied (the seed verified the backup after %s); %d acknowledged writes up to it present; %d syncs after the commit were sent status.restore Verifying (the parent from before the commit), answered with phases %v",
		round, backup.LastBackup.Location, rev, took.Round(100*time.Millisecond), sinceOrNever(verifiedAt, start), len(want), stale, answered)
	return w, rev, time.Since(roundStart)
}

// slowStore is an S3 endpoint in front of the store at target that holds
// every read of an object whose path contains infix for delay.
func slowStore(t *testing.T, target, infix string, delay time.Duration) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	// The Host header is signed (SigV4): the store must see the client's.
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = r.In.Host }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, infix) {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runningRestored tells whether the cluster runs on the restored data of
// the request: the bootstrap record names it, and its 3 members, none of
// them from before the restore, are Ready and etcd voters.
func (b *backupScenario) runningRestored(request string, before map[string]bool) (bool, string) {
	obj, ok := b.env.MC.Parent(ns, exampleName)
	if !ok {
		return false, "the EtcdCluster is gone"
	}
	if got := harnessString(obj, "status", "bootstrap", "restore", "request"); got != request {
		return false, fmt.Sprintf("the bootstrap record names %q", got)
	}
	pods := b.c.Pods()
	if len(pods) != 3 {
		return false, fmt.Sprintf("%d Pods", len(pods))
	}
	for _, p := range pods {
		if before[p.Name] || !p.Ready || p.Terminating {
			return false, fmt.Sprintf("Pod %s: from before %v, ready %v, terminating %v", p.Name, before[p.Name], p.Ready, p.Terminating)
		}
	}
	members, err := b.c.Members(b.env.Ctx())
	if err != nil {
		return false, err.Error()
	}
	if len(members) != 3 || HasPendingMember(members) {
		return false, DescribeMembers(members)
	}
	for _, m := range members {
		if m.IsLearner {
			return false, DescribeMembers(members)
		}
	}
	return true, DescribeMembers(members)
}

// seedVerified finds the seed Pod of the request and when its fetch
// verified the backup (zero while it has not).
func (b *backupScenario) seedVerified(request string) (string, time.Time) {
	for _, obj := range b.env.API.List(harness.TypePod, ns) {
		var pod corev1.Pod
		raw, _ := json.Marshal(obj)
		if json.Unmarshal(raw, &pod) != nil || pod.Annotations["etcd.database.coreos.com/restore-request"] != request {
			continue
		}
		for _, cs := range pod.Status.InitContainerStatuses {
			if cs.Name != "restore-fetch" {
				continue
			}
			for _, st := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if st != nil && st.ExitCode == 0 {
					return pod.Name, st.FinishedAt.Time
				}
			}
		}
		return pod.Name, time.Time{}
	}
	return "", time.Time{}
}

// committed tells whether the cluster's bootstrap record names the
// request: the restored cluster is the cluster.
func (b *backupScenario) committed(request string) bool {
	obj, ok := b.env.MC.Parent(ns, exampleName)
	return ok && harnessString(obj, "status", "bootstrap", "restore", "request") == request
}

// staleAfterCommit counts the cluster's syncs after the commit that were
// sent a parent whose status.restore says the request is Verifying while
// the hook knew it committed (its answer's bootstrap record names it):
// a parent from before the commit, served by the lagging cache, or one
// whose status such a sync overwrote. The first such sync is the commit
// itself. answered counts the phases of status.restore those syncs
// answered.
func (b *backupScenario) staleAfterCommit(request string) (n int, answered map[string]int) {
	answered = map[string]int{}
	commit := true
	for _, r := range b.env.MC.Records(ns, exampleName) {
		var req struct {
			Parent harness.Object `json:"parent"`
		}
		var resp struct {
			Status harness.Object `json:"status"`
		}
		if json.Unmarshal(r.Request, &req) != nil || json.Unmarshal(r.Response, &resp) != nil {
			continue
		}
		if harnessString(req.Parent, "status", "restore", "request") != request || harnessString(req.Parent, "status", "restore", "phase") != "Verifying" ||
			harnessString(resp.Status, "bootstrap", "restore", "request") != request {
			continue
		}
		if commit {
			commit = false
			continue
		}
		n++
		answered[harnessString(resp.Status, "restore", "phase")]++
	}
	return n, answered
}

// restoreCondition is the EtcdRestore's Succeeded condition.
func restoreCondition(env *harness.Env) (status, reason string) {
	obj, ok := env.RestoreMC.Parent(ns, exampleName)
	if !ok {
		return "", ""
	}
	var st struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Reason string `json:"reason"`
		} `json:"conditions"`
	}
	raw, _ := json.Marshal(obj["status"])
	_ = json.Unmarshal(raw, &st)
	for _, c := range st.Conditions {
		if c.Type == "Succeeded" {
			return c.Status, c.Reason
		}
	}
	return "", ""
}

// harnessString reads a string field of an object, "" when absent.
func harnessString(obj harness.Object, path ...string) string {
	var cur any = map[string]any(obj)
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[k]
	}
	s, _ := cur.(string)
	return s
}

func sinceOrNever(at, start time.Time) string {
	if at.IsZero() {
		return "never seen"
	}
	return at.Sub(start).Round(100 * time.Millisecond).String()
}
