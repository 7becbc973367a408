package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
	"github.com/etcdhook/etcd-hook/test/e2e/history"
)

// Restores end to end, on one environment: a restore from a missing and
// from a corrupt backup over a running cluster (refused, nothing
// touched), the disaster (every member lost on emptyDir, then an
// EtcdRestore), and a new cluster born from a backup. The seed's init
// containers are real processes: this project's binary fetching from a
// real S3 server, and etcd 3.6's own etcdutl restoring.

// RestoreStatus is the part of an EtcdCluster's status.restore the
// scenarios read.
type RestoreStatus struct {
	Request    string `json:"request"`
	Phase      string `json:"phase"`
	Message    string `json:"message"`
	Revision   int64  `json:"revision"`
	RestoredAt string `json:"restoredAt"`
}

// restoreView reads what the restore left in both objects' status.
type restoreView struct {
	Cluster struct {
		UID     string
		Restore RestoreStatus
		Newest  *struct {
			EtcdBackup string `json:"etcdBackup"`
			Location   string `json:"location"`
			Revision   int64  `json:"revision"`
		}
	}
	Object struct {
		Succeeded bool   `json:"succeeded"`
		Reason    string `json:"reason"`
		Phase     string `json:"phase"`
		Revision  int64  `json:"revision"`
	}
}

func (b *backupScenario) restoreView(cluster string) restoreView {
	var v restoreView
	if obj, ok := b.env.MC.Parent(ns, cluster); ok {
		var p struct {
			Metadata struct {
				UID string `json:"uid"`
			} `json:"metadata"`
			Status struct {
				Restore      RestoreStatus `json:"restore"`
				NewestBackup json.RawMessage
			} `json:"status"`
		}
		raw, _ := json.Marshal(obj)
		_ = json.Unmarshal(raw, &p)
		v.Cluster.UID, v.Cluster.Restore = p.Metadata.UID, p.Status.Restore
		var st struct {
			Newest json.RawMessage `json:"newestBackup"`
		}
		raw, _ = json.Marshal(obj["status"])
		_ = json.Unmarshal(raw, &st)
		if len(st.Newest) > 0 {
			_ = json.Unmarshal(st.Newest, &v.Cluster.Newest)
		}
	}
	if obj, ok := b.env.RestoreMC.Parent(ns, cluster); ok {
		raw, _ := json.Marshal(obj["status"])
		_ = json.Unmarshal(raw, &v.Object)
	}
	return v
}

func (b *backupScenario) waitRestore(cluster string, timeout time.Duration, what string, ok func(restoreView) bool) restoreView {
	b.t.Helper()
	var v restoreView
	err := b.env.WaitFor(timeout, cluster+": "+what, func() (bool, string) {
		v = b.restoreView(cluster)
		return ok(v), fmt.Sprintf("%+v", v)
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

// applyRestore creates the EtcdRestore named after the cluster, replacing
// an earlier one.
func (b *backupScenario) applyRestore(cluster string, spec map[string]any) {
	b.t.Helper()
	if _, ok := b.env.RestoreMC.Parent(ns, cluster); ok {
		if err := b.env.RestoreMC.DeleteParent(ns, cluster); err != nil {
			b.t.Fatal(err)
		}
		err := b.env.WaitFor(30*time.Second, "EtcdRestore "+cluster+" gone", func() (bool, string) {
			_, ok := b.env.RestoreMC.Parent(ns, cluster)
			return !ok, "still there"
		})
		if err != nil {
			b.t.Fatal(err)
		}
	}
	if _, err := b.env.RestoreMC.CreateParent(ns, cluster, spec); err != nil {
		b.t.Fatal(err)
	}
}

func (b *backupScenario) restoreSpec(cluster, key string) map[string]any {
	return map[string]any{
		"etcdCluster":       map[string]any{"name": cluster},
		"backupStorageType": "S3",
		"s3":                b.s3Spec(key, "aws"),
	}
}

// revisionWatch watches the writer's keys and remembers every revision it
// saw, so that a restore can be checked never to take a watcher back.
type revisionWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	revs   []int64
	errs   []string
	// compacted: a resumed watch was told its revision is compacted;
	// rewatched: a watch from then on is registered.
	compacted, rewatched bool
}

func watchRevisions(ctx context.Context, endpoint, prefix string) (*revisionWatch, error) {
	cli, err := NewClient(endpoint)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &revisionWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer cli.Close()
		var next int64
		for ctx.Err() == nil {
			opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
			if next > 0 {
				opts = append(opts, clientv3.WithRev(next))
			}
			// A watch of its own each time, cancelled when it ends: a
			// watch broken off without cancelling would stay registered
			// on the client's shared stream.
			wctx, wcancel := context.WithCancel(ctx)
			for resp := range cli.Watch(clientv3.WithRequireLeader(wctx), prefix, opts...) {
				if err := resp.Err(); err != nil {
					w.mu.Lock()
					w.errs = append(w.errs, fmt.Sprintf("%s (member %x, cluster %x)", err, resp.Header.MemberId, resp.Header.ClusterId))
					if resp.CompactRevision > 0 {
						// As kube-apiserver does: re-list from now on.
						next, w.compacted = 0, true
					}
					w.mu.Unlock()
					break
				}
				if resp.Created {
					// Registered: a write from now on is delivered.
					w.mu.Lock()
					w.rewatched = w.rewatched || (next == 0 && w.compacted)
					w.mu.Unlock()
					continue
				}
				w.mu.Lock()
				for _, ev := range resp.Events {
					w.revs = append(w.revs, ev.Kv.ModRevision)
					next = ev.Kv.ModRevision + 1
				}
				w.mu.Unlock()
			}
			wcancel()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w, nil
}

func (w *revisionWatch) seen() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int64(nil), w.revs...)
}

func (w *revisionWatch) errors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.errs...)
}

func (w *revisionWatch) stop() {
	w.cancel()
	<-w.done
}

// TestRestore: the bad backups, the disaster and the born-from-backup
// cluster, on one environment.
func TestRestore(t *testing.T) {
	s := newFaultScenario(t, harness.Options{Backups: true, Restores: true, ClusterCustomize: true})
	s.create("setup", faultVersion, 3)
	if t.Failed() {
		return
	}
	b := newBackupScenario(s)

	s.startFaultWriter("restore")
	s.waitWrites(writesAround)
	b.createBackup("nightly", b.s3Spec("demo/nightly.db", "aws"), nil)
	backup := b.waitBackup("nightly", 90*time.Second, "the backup succeeded", func(st BackupStatus) bool { return st.Succeeded && st.LastBackup != nil })
	s.waitWrites(writesAround)

	b.badBackups()
	if t.Failed() {
		return
	}
	b.disaster(backup)
	if t.Failed() {
		return
	}
	b.restoredAgainFromBefore(backup)
	if t.Failed() {
		return
	}
	b.bornFromBackup(backup)
}

// badBackups: a restore from a missing object, then from a corrupt one,
// over the running cluster: both refused with a condition naming the
// problem, and the members, their Pods and the writer untouched.
func (b *backupScenario) badBackups() {
	t := b.t
	before := b.world(b.c.PodNames())
	acked := b.w.Acked()

	b.applyRestore(exampleName, b.restoreSpec(exampleName, "demo/missing.db"))
	v := b.waitRestore(exampleName, 90*time.Second, "the restore from a missing object failed", func(v restoreView) bool {
		return v.Cluster.Restore.Phase == "Failed" && !v.Object.Succeeded && v.Object.Phase == "Failed"
	})
	if !strings.Contains(v.Object.Reason, "missing.db") {
		t.Errorf("missing object: the EtcdRestore's reason does not name the object: %q", v.Object.Reason)
	}

	// A corrupt copy of a real backup: one byte flipped in the middle.
	var corrupt []byte
	obj, err := b.client.GetObject(context.Background(), backupBucket, "demo/nightly.db", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if corrupt, err = io.ReadAll(obj); err != nil {
		t.Fatal(err)
	}
	_ = obj.Close()
	corrupt[len(corrupt)/2] ^= 0xff
	if _, err := b.client.PutObject(context.Background(), backupBucket, "demo/corrupt.db", bytes.NewReader(corrupt), int64(len(corrupt)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	b.applyRestore(exampleName, b.restoreSpec(exampleName, "demo/corrupt.db"))
	v = b.waitRestore(exampleName, 90*time.Second, "the restore from a corrupt object failed", func(v restoreView) bool {
		return v.Object.Phase == "Failed" && strings.Contains(v.Object.Reason, "corrupt.db")
	})
	_, st, _ := b.c.Parent()
	if status, reason := st.Condition("Degraded"); status != "True" || reason != "RestoreFailed" {
		t.Errorf("corrupt backup: Degraded is %s/%s, want True/RestoreFailed", status, reason)
	}
	if err := b.w.WaitAcked(b.env.Ctx(), 20, 30*time.Second); err != nil {
		t.Errorf("the writer stalled after the refused restores: %v", err)
	}
	b.checkWorld("bad backups", before, b.c.PodNames())
	if _, _, err := b.c.WaitConverged(convergeTimeout, 3); err != nil {
		t.Errorf("bad backups: the cluster is not as it was: %v", err)
	}
	t.Logf("bad backups: missing and corrupt objects refused (%q); members and Pods unchanged; writer acknowledged %d more puts", v.Object.Reason, b.w.Acked()-acked)
	if err := b.env.RestoreMC.DeleteParent(ns, exampleName); err != nil {
		t.Fatal(err)
	}
}

// disaster: every member Pod deleted on emptyDir; status names the newest
// backup; the EtcdRestore brings the same EtcdCluster back at its size
// with every write acknowledged up to the backup's revision, and a watcher
// never goes back in revisions.
func (b *backupScenario) disaster(backup BackupStatus) {
	t := b.t
	_, before, _ := b.c.Parent()
	uid := b.restoreView(exampleName).Cluster.UID
	watch, err := watchRevisions(b.env.Ctx(), b.c.ServiceURL(), b.w.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.stop()
	s := b.scenario
	s.waitWrites(writesAround)
	b.w.Stop()
	// Histories are linearizable between restores, not across one: the
	// checker's is checked whole here, on the healthy cluster, before the
	// loss (the restored cluster then answers with the backup's data).
	s.checkHistory(true)
	// The watcher may still be receiving the writer's last events.
	var seenBefore []int64
	_ = b.env.WaitFor(10*time.Second, "the watcher settled", func() (bool, string) {
		prev := len(seenBefore)
		time.Sleep(time.Second)
		seenBefore = watch.seen()
		return prev > 0 && len(seenBefore) == prev, fmt.Sprintf("%d events", len(seenBefore))
	})
	var maxSeen int64
	for _, r := range seenBefore {
		maxSeen = max(maxSeen, r)
	}

	s.deleteAll()
	s.waitParent(60*time.Second, "AllMembersLost", isAllMembersLost)
	v := b.waitRestore(exampleName, 30*time.Second, "status names the newest backup", func(v restoreView) bool {
		return v.Cluster.Newest != nil && v.Cluster.Newest.EtcdBackup == "nightly"
	})
	_, lost, _ := b.c.Parent()
	if msg := lost.ConditionMessage("Degraded"); !strings.Contains(msg, backup.LastBackup.Location) || !strings.Contains(msg, fmt.Sprint(backup.EtcdRevision)) {
		t.Errorf("disaster: the loss does not name the newest backup and its revision: %q", msg)
	}

	start := time.Now()
	// Every member of the restored cluster restores the backup from the
	// store and they start together: no member joins as a learner, and
	// none gets client traffic before it serves (endpoints_test.go).
	serving := watchServing(t, b.c)
	b.applyRestore(exampleName, map[string]any{"etcdCluster": map[string]any{"name": exampleName}, "backup": map[string]any{"name": "nightly"}})
	_, _, err = b.c.WaitConverged(convergeTimeout, 3)
	serving.stopWithoutLearners("disaster: the restored cluster's members start")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if restored := b.c.RestoredPods(); len(restored) != 3 {
		t.Errorf("disaster: %d member Pods restored the backup themselves (%v), want all 3", len(restored), restored)
	}
	v = b.waitRestore(exampleName, 60*time.Second, "both objects report the restore", func(v restoreView) bool {
		return v.Cluster.Restore.Phase == "Completed" && v.Object.Succeeded
	})
	if v.Cluster.UID != uid {
		t.Errorf("disaster: the EtcdCluster's UID changed from %s to %s", uid, v.Cluster.UID)
	}
	// The backup's status gives the revision it read before streaming; the
	// snapshot itself (what the fetch reports) may hold a few more.
	restored := v.Cluster.Restore.Revision
	if restored < backup.EtcdRevision || v.Object.Revision != restored {
		t.Errorf("disaster: restored revision %d (EtcdRestore %d), want at least the backup's %d", restored, v.Object.Revision, backup.EtcdRevision)
	}
	_, after, _ := b.c.Parent()
	if after.Bootstrap.SeedMember == before.Bootstrap.SeedMember || after.Bootstrap.RecreatedFrom != before.Bootstrap.SeedMember {
		t.Errorf("disaster: bootstrap record %+v, want a new seed recreated from %s", after.Bootstrap, before.Bootstrap.SeedMember)
	}

	// Every write acknowledged at or before the backup's revision is there.
	cli, err := NewClient(b.c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(b.env.Ctx(), 10*time.Second)
	defer cancel()
	want, missing := ackedMissing(t, cli, b.w, restored)
	if len(want) == 0 || len(missing) > 0 {
		t.Errorf("disaster: %d writes acknowledged up to revision %d, %d missing: %v", len(want), restored, len(missing), missing[:min(len(missing), 5)])
	}

	// A write after the restore reaches the watcher at a revision above
	// every one it saw before the loss: once its resumed watch was told
	// it is compacted and it has watched again, as a client re-lists (a
	// restore of three members at once is over before a watcher retrying
	// every 200 ms has got that far).
	err = b.env.WaitFor(30*time.Second, "the watcher watches the restored cluster", func() (bool, string) {
		watch.mu.Lock()
		defer watch.mu.Unlock()
		return watch.rewatched, fmt.Sprintf("errors %v", watch.errs)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, b.w.Prefix+"after-restore", "x"); err != nil {
		t.Fatal(err)
	}
	err = b.env.WaitFor(30*time.Second, "the watcher sees the write after the restore", func() (bool, string) {
		return len(watch.seen()) > len(seenBefore), fmt.Sprintf("%d events; the watch's errors: %v", len(watch.seen()), watch.errors())
	})
	if err != nil {
		t.Error(err)
	}
	for _, r := range watch.seen()[len(seenBefore):] {
		if r <= maxSeen {
			t.Errorf("disaster: the watcher saw revision %d after the restore, having seen %d before", r, maxSeen)
		}
	}
	b.resumedWatchIsCompacted(cli, maxSeen, "disaster")
	// The README's exactly-once rule: the EtcdRestore deleted and the same
	// manifest applied again (a new UID, the same backup) restores nothing.
	members := b.world(b.c.PodNames())
	b.applyRestore(exampleName, map[string]any{"etcdCluster": map[string]any{"name": exampleName}, "backup": map[string]any{"name": "nightly"}})
	b.waitRestore(exampleName, 60*time.Second, "the same manifest applied again is refused", func(v restoreView) bool {
		return v.Object.Phase == "Refused" && strings.Contains(v.Object.Reason, "restore-again")
	})
	b.checkWorld("the same EtcdRestore applied again", members, b.c.PodNames())
	t.Logf("disaster: all 3 Pods deleted; restored from %s at revision %d in %s; %d acknowledged writes up to it present; watcher: max %d before, next %v",
		backup.LastBackup.Location, restored, took.Round(100*time.Millisecond), len(want), maxSeen, watch.seen()[len(seenBefore):])
}

// restoredAgainFromBefore restores the same backup once more, on purpose
// (restore-again), over the cluster the first restore made. Its snapshot
// is older than that cluster's whole history, which began at the
// snapshot's revision plus the bump: the second restore must start above
// everything that history handed out, and a watch resumed from its last
// revision must be told it is compacted, never handed events of the new
// history under revisions it knows. (A bump counted from the snapshot
// alone, as before, came back where the first restore began; the soak
// found it.)
func (b *backupScenario) restoredAgainFromBefore(backup BackupStatus) {
	t := b.t
	cli, err := NewClient(b.c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(b.env.Ctx(), 30*time.Second)
	defer cancel()
	// Some history on the restored cluster, and its highest revision.
	var highest int64
	for i := range 20 {
		resp, err := cli.Put(ctx, fmt.Sprintf("%sfirst-restored/%02d", b.w.Prefix, i), "x")
		if err != nil {
			t.Fatal(err)
		}
		highest = resp.Header.Revision
	}
	first := b.restoreView(exampleName)
	_, st, _ := b.c.Parent()
	if st.Bootstrap.Restore == nil {
		t.Fatalf("restored again: the record names no restore: %+v", st.Bootstrap)
	}
	if _, err := b.env.RestoreMC.AnnotateParent(ns, exampleName, "etcd.database.coreos.com/restore-again", st.Bootstrap.Restore.Request); err != nil {
		t.Fatal(err)
	}
	v := b.waitRestore(exampleName, 3*time.Minute, "the backup restored again", func(v restoreView) bool {
		return v.Cluster.Restore.Request != st.Bootstrap.Restore.Request && v.Cluster.Restore.Phase == "Completed" && v.Object.Succeeded
	})
	if _, _, err := b.c.WaitConverged(convergeTimeout, 3); err != nil {
		t.Fatal(err)
	}
	after, err := NewClient(b.c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	resp, err := after.Get(ctx, b.w.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision <= highest {
		t.Errorf("restored again: the store is at revision %d, not above %d, which the first restore's history reached", resp.Header.Revision, highest)
	}
	want, missing := ackedMissing(t, after, b.w, v.Cluster.Restore.Revision)
	if len(want) == 0 || len(missing) > 0 {
		t.Errorf("restored again: %d writes acknowledged up to revision %d, %d missing: %v", len(want), v.Cluster.Restore.Revision, len(missing), missing[:min(len(missing), 5)])
	}
	if n, err := after.Get(ctx, b.w.Prefix+"first-restored/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || n.Count != 0 {
		t.Errorf("restored again: the first restored history's writes: %v, %v; want none", n, err)
	}
	b.resumedWatchIsCompacted(after, highest, "restored again")
	_, st, _ = b.c.Parent()
	t.Logf("restored again from %s (snapshot revision %d): the first restore's history reached %d (it began near %d), the second starts at %d; the record has seen %d",
		backup.LastBackup.Location, v.Cluster.Restore.Revision, highest, first.Cluster.Restore.Revision+1_000_000_000, resp.Header.Revision, st.Bootstrap.RevisionSeen)
}

// resumedWatchIsCompacted: a watch resumed after the restore from a
// revision of the lost history (the one after the last its watcher saw)
// is refused with a compaction error and gets no event: the restore bumped
// the revision above everything the old history reached and marked the
// bump compacted, so no client can be handed events of the new history
// under revisions it already saw from the old one.
func (b *backupScenario) resumedWatchIsCompacted(cli *clientv3.Client, lastSeen int64, what string) {
	t := b.t
	t.Helper()
	w := history.StartWatch(b.env.Ctx(), cli, b.w.Prefix, lastSeen+1)
	err := b.env.WaitFor(30*time.Second, "the resumed watch is refused as compacted", func() (bool, string) {
		return w.Compacted() != 0, "no compaction error yet"
	})
	events, _ := w.Stop()
	if err != nil {
		t.Errorf("%s: a watch resumed from revision %d, before the restore: %v", what, lastSeen+1, err)
	}
	if len(events) != 0 {
		t.Errorf("%s: a watch resumed from revision %d, before the restore, got %d events of the new history: %+v", what, lastSeen+1, len(events), events[:min(len(events), 3)])
	}
	t.Logf("%s: a watch resumed from revision %d got a compaction error at revision %d, and no event", what, lastSeen+1, w.Compacted())
}

// bornFromBackup: a new EtcdCluster whose spec names the backup starts
// with its data.
func (b *backupScenario) bornFromBackup(backup BackupStatus) {
	t := b.t
	const name = "copy"
	if _, err := b.env.MC.CreateParent(ns, name, map[string]any{
		"size": 3, "version": faultVersion, "restore": map[string]any{"backup": map[string]any{"name": "nightly"}},
	}); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Env: b.env, Namespace: ns, Name: name}
	start := time.Now()
	if _, _, err := c.WaitConverged(convergeTimeout, 3); err != nil {
		obj, _ := b.env.MC.Parent(ns, name)
		raw, _ := json.MarshalIndent(obj["status"], "", "  ")
		t.Fatalf("%v\nstatus: %s", err, raw)
	}
	cli, err := NewClient(c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(b.env.Ctx(), 10*time.Second)
	defer cancel()
	want := b.w.AckedUpTo(backup.EtcdRevision)
	resp, err := cli.Get(ctx, b.w.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count < int64(len(want)) {
		t.Errorf("born from backup: %d keys under %s, want at least the %d acknowledged up to revision %d", resp.Count, b.w.Prefix, len(want), backup.EtcdRevision)
	}
	t.Logf("born from backup: cluster %s converged at 3 in %s with %d keys", name, time.Since(start).Round(100*time.Millisecond), resp.Count)
}
