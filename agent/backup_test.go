package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// These tests run the agent against real etcd processes and a real S3
// server (versitygw) on loopback: signatures, multipart uploads and their
// abort are the store's own behaviour, not a fake's.

const bucket = "etcd-backups"

type fixture struct {
	etcd  *etcdtest.Cluster
	s3    *s3test.Server
	cfg   S3Config
	store *S3Store
}

func newFixture(t *testing.T, size int) *fixture {
	t.Helper()
	f := &fixture{etcd: etcdtest.StartCluster(t, etcdtest.Options{Size: size, Version: etcdtest.Version37}), s3: s3test.Start(t)}
	f.s3.CreateBucket(t, bucket)
	f.cfg = f.config(t, s3test.AccessKey, s3test.SecretKey)
	f.store = f.storeFor(t, f.cfg)
	return f
}

func (f *fixture) config(t *testing.T, access, secret string) S3Config {
	t.Helper()
	profile, err := LoadAWSProfile(s3test.AWSDir(t, access, secret))
	if err != nil {
		t.Fatal(err)
	}
	return S3Config{Path: bucket + "/clusters/demo/etcd.backup", Endpoint: f.s3.URL, ForcePathStyle: true, Profile: profile}
}

func (f *fixture) storeFor(t *testing.T, cfg S3Config) *S3Store {
	t.Helper()
	s, err := NewS3Store(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// put writes n keys and returns the revision of the last.
func (f *fixture) put(t *testing.T, prefix string, n int) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: f.etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var rev int64
	for i := range n {
		resp, err := cli.Put(context.Background(), fmt.Sprintf("%s%05d", prefix, i), strings.Repeat("v", 100))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

func (f *fixture) backup(t *testing.T, opts BackupOptions, cfg S3Config) report.BackupResult {
	t.Helper()
	if opts.Endpoints == nil {
		opts.Endpoints = f.etcd.Endpoints()
	}
	if opts.Timeout == 0 {
		opts.Timeout = time.Minute
	}
	return Backup(context.Background(), opts, f.storeFor(t, cfg), cfg.Key())
}

// download fetches key into a file.
func (f *fixture) download(t *testing.T, key string) (string, map[string]string) {
	t.Helper()
	obj, err := f.store.core.Client.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, obj); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	meta, tagged, err := describe(context.Background(), f.store, key)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range tagged {
		meta["tag:"+k] = v
	}
	return path, meta
}

func etcdutl(t *testing.T, args ...string) string {
	t.Helper()
	bin := testenv.Binary(t, testenv.Etcdutl(etcdtest.Version37))
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestBackupOneShot: the stored object is etcd's snapshot, whole and
// checked: etcdutl accepts it, and restored into a fresh etcd it holds
// every write acknowledged at or before the reported revision.
func TestBackupOneShot(t *testing.T) {
	f := newFixture(t, 3)
	last := f.put(t, "/acked/", 300)
	// One endpoint, as a client Service would be: the agent finds the
	// other members through etcd's member list.
	res := f.backup(t, BackupOptions{Endpoints: f.etcd.Endpoints()[:1]}, f.cfg)
	if !res.Succeeded {
		t.Fatalf("backup failed: %s", res.Reason)
	}
	if res.EtcdRevision < last || res.EtcdVersion != etcdtest.Version37 || res.ClusterID == "" || res.Location != "s3://"+bucket+"/clusters/demo/etcd.backup" {
		t.Errorf("result %+v: want revision >= %d, version %s, a cluster ID, the one-shot key", res, last, etcdtest.Version37)
	}
	path, meta := f.download(t, f.cfg.Key())
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != res.Size || hex.EncodeToString(sum[:]) != res.SHA256 {
		t.Errorf("stored object: %d bytes, sha256 %x; the result says %d, %s", len(data), sum, res.Size, res.SHA256)
	}
	wantMeta := map[string]string{MetaRevision: fmt.Sprint(res.EtcdRevision), MetaVersion: res.EtcdVersion, MetaClusterID: res.ClusterID, "tag:" + MetaSHA256: res.SHA256}
	for k, v := range wantMeta {
		if meta[k] != v {
			t.Errorf("object metadata %s = %q, want %q (all: %v)", k, meta[k], v, meta)
		}
	}
	status := etcdutl(t, "snapshot", "status", path, "-w", "json")
	if !strings.Contains(status, `"revision":`) {
		t.Errorf("etcdutl snapshot status: %s", status)
	}

	// Restore into a fresh single-member etcd and read every key back.
	dataDir := filepath.Join(t.TempDir(), "restored")
	etcdutl(t, "snapshot", "restore", path, "--data-dir", dataDir, "--name", "restored",
		"--initial-cluster", "restored=http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380")
	// The generated flags are overridden: etcd keeps a flag's last value,
	// and on a data dir that has a WAL it ignores the bootstrap flags.
	restored := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: etcdtest.Version37, ExtraArgs: []string{"--data-dir=" + dataDir, "--name=restored"}})
	cli, err := clientv3.New(clientv3.Config{Endpoints: restored.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	got, err := cli.Get(context.Background(), "/acked/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 300 || got.Header.Revision < last {
		t.Errorf("restored: %d keys at revision %d; want all 300 acknowledged at or before revision %d", got.Count, got.Header.Revision, last)
	}
}

// TestBackupPeriodicRetention: named by revision and time, pruned to the
// newest maxBackups by those numbers, across a revision gaining a digit.
func TestBackupPeriodicRetention(t *testing.T) {
	f := newFixture(t, 1)
	at := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	var results []report.BackupResult
	for i := range 5 {
		// 2, 5, 9, 14, 20 more keys: the revisions cross from one digit to two.
		f.put(t, fmt.Sprintf("/round%d/", i), i+2)
		now := at.Add(time.Duration(i) * time.Minute)
		res := f.backup(t, BackupOptions{Periodic: true, MaxBackups: 2, Now: func() time.Time { return now }}, f.cfg)
		if !res.Succeeded {
			t.Fatalf("backup %d: %s", i, res.Reason)
		}
		results = append(results, res)
	}
	objs, err := f.store.List(context.Background(), f.cfg.Key())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	want := []string{
		strings.TrimPrefix(results[3].Location, "s3://"+bucket+"/"),
		strings.TrimPrefix(results[4].Location, "s3://"+bucket+"/"),
	}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("kept %v, want the two newest %v", keys, want)
	}
	if results[4].Pruned != 1 {
		t.Errorf("the last run pruned %d, want 1", results[4].Pruned)
	}
}

// TestBackupFaults: each fault ends in a failed run whose reason names the
// cause, and the backup already stored stays exactly as it was.
func TestBackupFaults(t *testing.T) {
	f := newFixture(t, 3)
	f.put(t, "/before/", 50)
	first := f.backup(t, BackupOptions{}, f.cfg)
	if !first.Succeeded {
		t.Fatalf("first backup: %s", first.Reason)
	}
	unreachable := f.cfg
	unreachable.Endpoint = "http://127.0.0.1:1"
	noBucket := f.cfg
	noBucket.Path = "no-such-bucket/etcd.backup"
	tests := []struct {
		name    string
		opts    BackupOptions
		cfg     S3Config
		wantErr string
	}{
		{name: "wrong credentials", cfg: f.config(t, s3test.AccessKey, "not-the-secret"), wantErr: "refused the credentials"},
		{name: "unknown access key", cfg: f.config(t, "nobody", "nothing"), wantErr: "refused the credentials"},
		{name: "missing bucket", cfg: noBucket, wantErr: `the bucket "no-such-bucket" does not exist`},
		{name: "unreachable store", cfg: unreachable, wantErr: "cannot be reached"},
		{name: "unreachable cluster", cfg: f.cfg, opts: BackupOptions{Endpoints: []string{"http://127.0.0.1:1"}}, wantErr: "no etcd member answered"},
		{name: "timeout", cfg: f.cfg, opts: BackupOptions{Timeout: time.Millisecond}, wantErr: "longer than its timeout of 1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := f.backup(t, tt.opts, tt.cfg)
			if res.Succeeded || !strings.Contains(res.Reason, tt.wantErr) {
				t.Errorf("succeeded %v, reason %q; want a failure naming %q", res.Succeeded, res.Reason, tt.wantErr)
			}
			f.checkUntouched(t, first)
		})
	}

	t.Run("lost quorum", func(t *testing.T) {
		f.etcd.Stop(1)
		f.etcd.Stop(2)
		defer func() { f.etcd.Start(1); f.etcd.Start(2) }()
		res := f.backup(t, BackupOptions{Timeout: 20 * time.Second}, f.cfg)
		if res.Succeeded || !strings.Contains(res.Reason, "lost its quorum") {
			t.Errorf("succeeded %v, reason %q; want a failure naming the lost quorum", res.Succeeded, res.Reason)
		}
		f.checkUntouched(t, first)
	})
}

// checkUntouched: the object stored by an earlier run is still the same,
// and no multipart upload was left behind.
func (f *fixture) checkUntouched(t *testing.T, earlier report.BackupResult) {
	t.Helper()
	path, _ := f.download(t, f.cfg.Key())
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != earlier.SHA256 {
		t.Errorf("the stored backup changed: sha256 %x, was %s", sum, earlier.SHA256)
	}
	f.checkNoUploads(t)
}

func (f *fixture) checkNoUploads(t *testing.T) {
	t.Helper()
	uploads, err := f.store.core.ListMultipartUploads(context.Background(), bucket, "", "", "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(uploads.Uploads) > 0 {
		t.Errorf("incomplete multipart uploads left behind: %+v", uploads.Uploads)
	}
}

// TestPutAbortsOnCorruptSnapshot: a snapshot that fails its hash check at
// the very end (after several parts went up) is never completed: the
// upload is aborted, and the object already at the key is unchanged.
func TestPutAbortsOnCorruptSnapshot(t *testing.T) {
	f := newFixture(t, 1)
	good := f.backup(t, BackupOptions{}, f.cfg)
	if !good.Succeeded {
		t.Fatal(good.Reason)
	}
	f.store.partSize = 5 << 20 // S3's smallest part, so that the stream spans several
	db := bytes.Repeat([]byte("0123456789abcdef"), (12<<20)/16)
	stream := withTrailer(db)
	stream[len(stream)-1] ^= 0xff
	err := f.store.Put(context.Background(), f.cfg.Key(), newVerifyingReader(bytes.NewReader(stream)), nil)
	if err == nil || !strings.Contains(err.Error(), "integrity check") {
		t.Fatalf("Put of a corrupt snapshot: %v, want the integrity error", err)
	}
	f.checkUntouched(t, good)

	// The same stream intact is stored whole.
	stream[len(stream)-1] ^= 0xff
	if err := f.store.Put(context.Background(), "clusters/demo/intact", newVerifyingReader(bytes.NewReader(stream)), nil); err != nil {
		t.Fatal(err)
	}
	path, _ := f.download(t, "clusters/demo/intact")
	if data, _ := os.ReadFile(path); !bytes.Equal(data, stream) {
		t.Errorf("the stored object (%d bytes) is not the stream (%d bytes)", len(data), len(stream))
	}
	f.checkNoUploads(t)
}

// describe reads what is stored with key: its user metadata (lower-case
// names) and its tags.
func describe(ctx context.Context, s *S3Store, key string) (meta, tagged map[string]string, err error) {
	info, err := s.core.Client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return nil, nil, err
	}
	meta = map[string]string{}
	for k, v := range info.UserMetadata {
		meta[strings.ToLower(k)] = v
	}
	t, err := s.core.Client.GetObjectTagging(ctx, s.bucket, key, minio.GetObjectTaggingOptions{})
	if err != nil {
		return nil, nil, err
	}
	return meta, t.ToMap(), nil
}
