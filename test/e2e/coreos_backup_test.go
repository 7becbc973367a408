package e2e

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// TestRestoreFromCoreOSBackup: the backups a user brings from the CoreOS
// backup operator. That operator streamed a snapshot from the member with
// the highest revision into the object spec.s3.path names (for a periodic
// backup, <path>_v<revision>_<time>) with no checksum of its own beside it,
// and recorded in the EtcdBackup's status only succeeded, etcdVersion,
// etcdRevision and lastSuccessDate.
//   - The hook's backup controller keeps that one-shot EtcdBackup as it is:
//     it does not take it again over the object it stored.
//   - An EtcdRestore in the CoreOS shape, naming that object, restores it:
//     every write acknowledged up to the snapshot is there, none after it.
func TestRestoreFromCoreOSBackup(t *testing.T) {
	s := newFaultScenario(t, harness.Options{Backups: true, Restores: true, ClusterCustomize: true})
	s.create("setup", faultVersion, 3)
	if t.Failed() {
		return
	}
	b := newBackupScenario(s)
	s.startFaultWriter("coreos-backup")
	s.waitWrites(writesAround)

	// The CoreOS backup operator's one-shot run, as it wrote the object.
	rev, key := b.coreosSnapshot("coreos/demo.db")
	s.waitWrites(writesAround)
	taken := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339)
	if _, err := s.env.API.Create(harness.Object{
		"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
		"metadata": map[string]any{"name": "coreos-oneshot", "namespace": ns},
		"spec": map[string]any{"etcdEndpoints": []any{b.c.ServiceURL()}, "storageType": "S3",
			"s3": map[string]any{"path": backupBucket + "/coreos/demo.db", "awsSecret": "aws", "endpoint": b.s3.URL, "forcePathStyle": true}},
		"status": map[string]any{"succeeded": true, "etcdVersion": faultVersion, "etcdRevision": float64(rev), "lastSuccessDate": taken},
	}); err != nil {
		t.Fatal(err)
	}
	sum := b.objectSHA256(key)
	// Held long enough for the backup controller to have run it, had it
	// taken it again.
	time.Sleep(5 * time.Second)
	st := b.status("coreos-oneshot")
	if !st.Succeeded || st.EtcdRevision != rev || st.LastRun != nil {
		t.Errorf("the CoreOS one-shot backup's status became %+v; want it kept (succeeded, revision %d, no run)", st, rev)
	}
	if got := b.objectSHA256(key); got != sum {
		t.Errorf("the object the CoreOS backup stored changed (sha256 %s, was %s): it was taken again over it", got, sum)
	}
	if n := len(b.env.API.List(harness.TypePod, ns)) - len(b.c.Pods()); n != 0 {
		t.Errorf("%d Pods besides the members: a backup run started", n)
	}

	s.waitWrites(writesAround)
	b.w.Stop()
	s.checkHistory(true)
	b.applyRestore(exampleName, b.restoreSpec(exampleName, "coreos/demo.db"))
	v := b.waitRestore(exampleName, 3*time.Minute, "restored from the CoreOS backup", func(v restoreView) bool {
		return v.Cluster.Restore.Phase == "Completed" && v.Object.Succeeded
	})
	if t.Failed() {
		return
	}
	if _, _, err := b.c.WaitConverged(convergeTimeout, 3); err != nil {
		t.Fatal(err)
	}
	cli, err := NewClient(b.c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The revision read before the snapshot streamed; the snapshot itself,
	// which the fetch reports, may hold a few more.
	restored := v.Cluster.Restore.Revision
	if restored < rev {
		t.Errorf("restored revision %d, below the %d read before the snapshot", restored, rev)
	}
	want, missing := ackedMissing(t, cli, b.w, restored)
	if len(want) == 0 || len(missing) > 0 {
		t.Errorf("restored: %d writes acknowledged up to revision %d, %d missing: %v", len(want), restored, len(missing), missing[:min(len(missing), 5)])
	}
	after := b.w.AckedAfter(restored)
	ctx, cancel := context.WithTimeout(b.env.Ctx(), 10*time.Second)
	defer cancel()
	present := 0
	for _, k := range after {
		resp, err := cli.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		present += len(resp.Kvs)
	}
	if len(after) == 0 || present != 0 {
		t.Errorf("restored: %d of the %d writes acknowledged after the snapshot are there, want none", present, len(after))
	}
	t.Logf("CoreOS backup %s at revision %d kept as it was; restored at revision %d: %d acknowledged writes up to it present, %d after it gone",
		key, rev, restored, len(want), len(after))
}

// coreosSnapshot stores a snapshot as the CoreOS backup operator did: the
// revision read first, then the snapshot streamed from the cluster into
// the object, nothing else beside it. It returns the revision and the key.
func (b *backupScenario) coreosSnapshot(key string) (int64, string) {
	t := b.t
	t.Helper()
	cli, err := NewClient(b.c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(b.env.Ctx(), time.Minute)
	defer cancel()
	resp, err := cli.Get(ctx, "/", clientv3.WithSerializable())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	info, err := b.client.PutObject(ctx, backupBucket, key, io.Reader(rc), -1, minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(fmt.Errorf("store the snapshot as the CoreOS backup operator did: %w", err))
	}
	t.Logf("CoreOS-style snapshot at revision %d: s3://%s/%s, %d bytes", resp.Header.Revision, backupBucket, key, info.Size)
	return resp.Header.Revision, key
}
