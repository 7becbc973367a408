package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// Backups end to end: EtcdBackups of the CoreOS shape on a running
// cluster, with the writer running, stored in a real S3 server
// (versitygw); each run is a Pod of the hook's own binary in backup mode,
// run by the harness's kubelet like any other.

const backupBucket = "etcd-backups"

// BackupStatus is the part of an EtcdBackup's status the scenarios read.
type BackupStatus struct {
	Succeeded    bool   `json:"succeeded"`
	Reason       string `json:"Reason"`
	EtcdVersion  string `json:"etcdVersion"`
	EtcdRevision int64  `json:"etcdRevision"`
	LastBackup   *struct {
		Location string `json:"location"`
		Size     int64  `json:"size"`
		SHA256   string `json:"sha256"`
		Revision int64  `json:"revision"`
	} `json:"lastBackup"`
	LastRun *struct {
		Name      string `json:"name"`
		End       string `json:"end"`
		Succeeded bool   `json:"succeeded"`
	} `json:"lastRun"`
}

type backupScenario struct {
	*scenario
	s3     *s3test.Server
	client *minio.Client
}

// newBackupScenario starts a real S3 server beside the scenario's
// cluster, with the backups' bucket, a client of its own and the Secret
// "aws" holding its credentials.
func newBackupScenario(s *scenario) *backupScenario {
	t := s.t
	t.Helper()
	b := &backupScenario{scenario: s, s3: s3test.Start(t)}
	b.s3.CreateBucket(t, backupBucket)
	client, err := minio.New(strings.TrimPrefix(b.s3.URL, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s3test.AccessKey, s3test.SecretKey, ""), Region: s3test.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	b.client = client
	b.createSecret("aws", s3test.AccessKey, s3test.SecretKey)
	return b
}

func (b *backupScenario) status(name string) BackupStatus {
	var st BackupStatus
	if obj, ok := b.env.BackupMC.Parent(ns, name); ok {
		raw, _ := json.Marshal(obj["status"])
		_ = json.Unmarshal(raw, &st)
	}
	return st
}

func (b *backupScenario) createSecret(name, access, secret string) {
	b.t.Helper()
	putSecret(b.t, b.env, name, map[string][]byte{
		"credentials": fmt.Appendf(nil, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", access, secret),
		"config":      []byte("[default]\nregion = " + s3test.Region + "\n"),
	})
}

// putSecret creates the Secret in the test namespace, or replaces its data.
func putSecret(t testing.TB, env *harness.Env, name string, data map[string][]byte) {
	t.Helper()
	secret := corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       data,
	}
	var obj harness.Object
	raw, _ := json.Marshal(secret)
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	if old, ok := env.API.Get(harness.Ref{Type: harness.TypeSecret, Namespace: ns, Name: name}); ok {
		obj["metadata"].(map[string]any)["resourceVersion"] = old["metadata"].(map[string]any)["resourceVersion"]
		if _, _, err := env.API.Update(obj); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := env.API.Create(obj); err != nil {
		t.Fatal(err)
	}
}

func (b *backupScenario) createBackup(name string, s3 map[string]any, policy map[string]any) {
	b.t.Helper()
	spec := map[string]any{"clusterName": exampleName, "storageType": "S3", "s3": s3}
	if policy != nil {
		spec["backupPolicy"] = policy
	}
	if _, err := b.env.BackupMC.CreateParent(ns, name, spec); err != nil {
		b.t.Fatal(err)
	}
}

func (b *backupScenario) s3Spec(path, secret string) map[string]any {
	return map[string]any{"path": backupBucket + "/" + path, "awsSecret": secret, "endpoint": b.s3.URL, "forcePathStyle": true}
}

func (b *backupScenario) waitBackup(name string, timeout time.Duration, what string, ok func(BackupStatus) bool) BackupStatus {
	b.t.Helper()
	var st BackupStatus
	err := b.env.WaitFor(timeout, name+": "+what, func() (bool, string) {
		st = b.status(name)
		return ok(st), fmt.Sprintf("%+v", st)
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return st
}

func (b *backupScenario) keys(prefix string) []string {
	var out []string
	for obj := range b.client.ListObjects(context.Background(), backupBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			b.t.Fatal(obj.Err)
		}
		out = append(out, obj.Key)
	}
	return out
}

// TestBackups: a one-shot backup of a cluster under writes, checked by
// etcdutl and by a restore; a periodic backup over five periods keeping
// the two newest; and the faults, side by side on the same cluster, which
// they must leave untouched.
func TestBackups(t *testing.T) {
	s := newFaultScenario(t, harness.Options{Backups: true})
	s.create("setup", faultVersion, 3)
	b := newBackupScenario(s)
	b.createSecret("aws-wrong", s3test.AccessKey, "not-the-secret")
	before := s.world(s.c.PodNames())

	s.startFaultWriter("backups")
	s.waitWrites(writesAround)

	// One-shot, the CoreOS backup_cr.yaml with clusterName for endpoints.
	start := time.Now()
	b.createBackup("oneshot", b.s3Spec("oneshot/etcd.backup", "aws"), nil)
	st := b.waitBackup("oneshot", 60*time.Second, "succeeded", func(st BackupStatus) bool { return st.Succeeded && st.LastBackup != nil })
	took := time.Since(start)
	b.checkRestore(st)

	// A volume destination: a claim of the namespace.
	b.checkVolumeBackup()

	// Periodic every 20 s (10 s under -short) keeping 2, and the faults
	// beside it.
	period := 20 * time.Second
	if testing.Short() {
		period = 10 * time.Second
	}
	b.createBackup("periodic", b.s3Spec("periodic/etcd.backup", "aws"), map[string]any{"backupIntervalInSecond": int64(period / time.Second), "maxBackups": 2})
	// Over the one-shot's object: a failed run must leave it as it was.
	b.createBackup("wrong-credentials", b.s3Spec("oneshot/etcd.backup", "aws-wrong"), nil)
	unreachable := b.s3Spec("unreachable/etcd.backup", "aws")
	unreachable["endpoint"] = "http://127.0.0.1:1"
	b.createBackup("unreachable-store", unreachable, nil)
	b.createBackup("missing-secret", b.s3Spec("missing/etcd.backup", "no-such-secret"), nil)

	faults := map[string]string{
		"wrong-credentials": "refused the credentials",
		"unreachable-store": "cannot be reached",
		"missing-secret":    `Secret "no-such-secret" (spec.s3.awsSecret) not found`,
	}
	for name, want := range faults {
		st := b.waitBackup(name, 60*time.Second, "failed naming "+want, func(st BackupStatus) bool {
			return !st.Succeeded && strings.Contains(st.Reason, want)
		})
		t.Logf("%s: %s", name, st.Reason)
		if got := b.keys(strings.Split(name, "-")[0]); len(got) > 0 {
			t.Errorf("%s: objects stored: %v", name, got)
		}
	}
	if sum := b.objectSHA256("oneshot/etcd.backup"); sum != st.LastBackup.SHA256 {
		t.Errorf("the one-shot backup changed under a failed run over it: sha256 %s, was %s", sum, st.LastBackup.SHA256)
	}

	// Five periods (three under -short: the third run is the first that
	// must delete one), counting the successful runs the status reports.
	periods := 5
	if testing.Short() {
		periods = 3
	}
	runs := map[string]bool{}
	periodicStart := time.Now()
	for time.Since(periodicStart) < time.Duration(periods)*period+10*time.Second {
		if st := b.status("periodic"); st.LastRun != nil && st.LastRun.Succeeded && st.LastRun.End != "" {
			runs[st.LastRun.Name] = true
		}
		time.Sleep(time.Second)
	}
	if len(runs) < periods {
		t.Errorf("periodic: %d successful runs in %d periods, want at least %d: %v", len(runs), periods, periods, runs)
	}
	kept := b.keys("periodic/")
	if len(kept) != 2 {
		t.Errorf("periodic: %d objects kept, want exactly 2 (maxBackups): %v", len(kept), kept)
	}
	last := b.status("periodic")
	if last.LastBackup == nil || !slices.Contains(kept, strings.TrimPrefix(last.LastBackup.Location, "s3://"+backupBucket+"/")) {
		t.Errorf("periodic: the last backup %+v is not among the kept %v", last.LastBackup, kept)
	}

	// The faults left the cluster alone, and the writer lost nothing.
	s.checkWorld("backups", before, s.c.PodNames())
	acked, lost := s.verifyWrites("backups")
	ReportFailure(t, Failure{
		Fault:    fmt.Sprintf("backups beside a writer: one-shot to S3 and to a volume, periodic (%s, keep 2) and three failing EtcdBackups (wrong credentials, unreachable store, missing Secret)", period),
		Expected: "the one-shot restores to every write acknowledged at or before its revision; the periodic keeps the 2 newest; each fault fails with a reason naming it, stores nothing, and the cluster is untouched",
		Observed: fmt.Sprintf("one-shot stored in %s at revision %d (%d bytes), restored with etcdutl: every write acknowledged up to it present; periodic: %d runs in %s, %d objects kept; faults: reasons name the credentials, the unreachable store, the missing Secret; the one-shot object, under the failed run with wrong credentials, unchanged; members and Pods unchanged",
			round(took), st.EtcdRevision, st.LastBackup.Size, len(runs), round(time.Since(periodicStart)), len(kept)),
		Acked: acked, Lost: lost, Undisturbed: true,
	})
}

// checkRestore downloads the one-shot backup, has etcdutl check it and
// restore it into a fresh etcd, and reads back every write the writer had
// acknowledged at or before the backup's revision.
func (b *backupScenario) checkRestore(st BackupStatus) {
	t := b.t
	key := strings.TrimPrefix(st.LastBackup.Location, "s3://"+backupBucket+"/")
	obj, err := b.client.GetObject(context.Background(), backupBucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "snapshot.db")
	out, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, obj); err != nil {
		t.Fatal(err)
	}
	_ = out.Close()
	etcdutl := testenv.Binary(t, testenv.Etcdutl(faultVersion))
	if msg, err := exec.Command(etcdutl, "snapshot", "status", file, "-w", "json").CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot status: %v\n%s", err, msg)
	}
	dataDir := filepath.Join(dir, "restored")
	if msg, err := exec.Command(etcdutl, "snapshot", "restore", file, "--data-dir", dataDir, "--name", "restored",
		"--initial-cluster", "restored=http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380").CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, msg)
	}
	restored := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: faultVersion, ExtraArgs: []string{"--data-dir=" + dataDir, "--name=restored"}})
	cli, err := clientv3.New(clientv3.Config{Endpoints: restored.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	want, missing := ackedMissing(t, cli, b.w, st.EtcdRevision)
	if len(want) == 0 || len(missing) > 0 {
		t.Errorf("restored backup at revision %d: %d writes acknowledged up to it, %d missing: %v", st.EtcdRevision, len(want), len(missing), missing[:min(len(missing), 5)])
	}
	t.Logf("one-shot backup %s: revision %d, %d bytes; restored: all %d writes acknowledged up to it present", st.LastBackup.Location, st.EtcdRevision, st.LastBackup.Size, len(want))
}

// checkVolumeBackup: storageType PVC writes the backup as a file on the
// claim, which etcdutl accepts.
func (b *backupScenario) checkVolumeBackup() {
	t := b.t
	if _, err := b.env.API.Create(harness.Object{
		"apiVersion": "v1", "kind": "PersistentVolumeClaim",
		"metadata": map[string]any{"name": "backups", "namespace": ns},
		"spec":     map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}},
	}); err != nil {
		t.Fatal(err)
	}
	spec := map[string]any{"clusterName": exampleName, "storageType": "PVC", "pvc": map[string]any{"claimName": "backups", "path": "demo/etcd.backup"}}
	if _, err := b.env.BackupMC.CreateParent(ns, "on-volume", spec); err != nil {
		t.Fatal(err)
	}
	st := b.waitBackup("on-volume", 60*time.Second, "succeeded", func(st BackupStatus) bool { return st.Succeeded && st.LastBackup != nil })
	dir, ok := b.env.Kubelet.ClaimDir(ns, "backups")
	if !ok {
		t.Fatal("the claim is gone")
	}
	file := filepath.Join(dir, "demo", "etcd.backup")
	fi, err := os.Stat(file)
	if err != nil || fi.Size() != st.LastBackup.Size || st.LastBackup.Location != "pvc://backups/demo/etcd.backup" {
		t.Fatalf("backup file %s: %v (size %d); status %+v", file, err, fi.Size(), st.LastBackup)
	}
	if msg, err := exec.Command(testenv.Binary(t, testenv.Etcdutl(faultVersion)), "snapshot", "status", file).CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot status %s: %v\n%s", file, err, msg)
	}
	t.Logf("volume backup: %s, %d bytes at revision %d", st.LastBackup.Location, st.LastBackup.Size, st.EtcdRevision)
}

// objectSHA256 is the hex sha256 of a stored object.
func (b *backupScenario) objectSHA256(key string) string {
	b.t.Helper()
	obj, err := b.client.GetObject(context.Background(), backupBucket, key, minio.GetObjectOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	defer obj.Close()
	h := sha256.New()
	if _, err := io.Copy(h, obj); err != nil {
		b.t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ackedMissing lists the writes the writer had acknowledged at or before
// rev, and those of them cli cannot read.
func ackedMissing(t *testing.T, cli *clientv3.Client, w *Writer, rev int64) (want, missing []string) {
	t.Helper()
	want = w.AckedUpTo(rev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, w.Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = true
	}
	for _, k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	return want, missing
}
