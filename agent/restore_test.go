package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/minio/minio-go/v7"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/s3test"
)

// restoreFixture is one etcd with keys, an S3 server holding a backup of
// it made by Backup, and damaged copies of that backup beside it.
type restoreFixture struct {
	*fixture
	// backup is the report.BackupResult of the backup at f.cfg.Key(); object its bytes.
	backup report.BackupResult
	object []byte
	// last is the revision of the last key written before the backup.
	last   int64
	awsDir string
	// exe stands in for this executable, copied into the tools dir.
	exe []byte
}

const (
	keyCorrupt   = "clusters/demo/corrupt"
	keyTruncated = "clusters/demo/truncated"
	keyNotBolt   = "clusters/demo/not-bbolt"
	keyRetagged  = "clusters/demo/retagged"
	keyMissing   = "clusters/demo/missing"
)

func newRestoreFixture(t *testing.T) *restoreFixture {
	t.Helper()
	f := &restoreFixture{fixture: newFixture(t, 1)}
	f.last = f.put(t, "/restored/", 100)
	f.backup = f.fixture.backup(t, BackupOptions{}, f.cfg)
	if !f.backup.Succeeded {
		t.Fatalf("backup: %s", f.backup.Reason)
	}
	path, meta := f.download(t, f.cfg.Key())
	var err error
	if f.object, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{MetaVersion: meta[MetaVersion], MetaRevision: meta[MetaRevision]}

	corrupt := bytes.Clone(f.object)
	corrupt[len(corrupt)/2] ^= 0xff
	junk := make([]byte, 64<<10)
	_, _ = rand.Read(junk)
	f.upload(t, keyCorrupt, corrupt, stored, nil)
	f.upload(t, keyTruncated, f.object[:len(f.object)-4096], stored, nil)
	f.upload(t, keyNotBolt, withTrailer(junk), stored, nil)
	// Whole and intact, but not what our backup recorded it to be.
	f.upload(t, keyRetagged, f.object, stored, map[string]string{MetaSHA256: strings.Repeat("0", 64)})

	f.awsDir = s3test.AWSDir(t, s3test.AccessKey, s3test.SecretKey)
	f.exe = []byte("#!/bin/false\nnot really etcd-hook\n")
	return f
}

func (f *restoreFixture) upload(t *testing.T, key string, data []byte, meta, tagged map[string]string) {
	t.Helper()
	opts := minio.PutObjectOptions{UserMetadata: meta, UserTags: tagged}
	if _, err := f.store.core.Client.PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)), opts); err != nil {
		t.Fatal(err)
	}
}

// options fetches key from the fixture's store into fresh directories.
func (f *restoreFixture) options(t *testing.T, key string) FetchOptions {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "etcd-hook-under-test")
	if err := os.WriteFile(exe, f.exe, 0o700); err != nil {
		t.Fatal(err)
	}
	return FetchOptions{
		S3:          &S3Source{Path: bucket + "/" + key, Endpoint: f.s3.URL, ForcePathStyle: true, AWSDir: f.awsDir},
		EtcdVersion: etcdtest.Version37,
		DataDir:     filepath.Join(dir, "data"),
		Snapshot:    filepath.Join(dir, "restore", "snapshot.db"),
		ToolsDir:    filepath.Join(dir, "tools"),
		Executable:  exe,
		Timeout:     time.Minute,
	}
}

// ignoreReason: reasons are checked by substring, the rest exactly.
var ignoreReason = cmpopts.IgnoreFields(report.RestoreResult{}, "Reason")

// TestFetch: each backup either ends up at --snapshot, verified, with the
// result naming its revision and release, or is refused with nothing left
// at --snapshot; a refusal is permanent exactly when another attempt would
// meet the same backup. The tools are copied in every case.
func TestFetch(t *testing.T) {
	f := newRestoreFixture(t)
	source := "s3://" + bucket + "/" + f.cfg.Key()
	good := report.RestoreResult{Succeeded: true, Source: source, Size: f.backup.Size, SHA256: f.backup.SHA256, Revision: f.last, EtcdVersion: etcdtest.Version37}

	// The same snapshot on a volume: with FileStore's metadata beside it,
	// and bare, as if copied there by hand.
	files := t.TempDir()
	fileStore, err := NewFileStore(files, "backups")
	if err != nil {
		t.Fatal(err)
	}
	fileBackup := Backup(context.Background(), BackupOptions{Endpoints: f.etcd.Endpoints(), Timeout: time.Minute}, fileStore, "demo/etcd.backup")
	if !fileBackup.Succeeded {
		t.Fatal(fileBackup.Reason)
	}
	withMeta := filepath.Join(files, "demo", "etcd.backup")
	bare := filepath.Join(files, "bare.db")
	if err := os.WriteFile(bare, f.object, 0o644); err != nil {
		t.Fatal(err)
	}

	wrongSecret := s3test.AWSDir(t, s3test.AccessKey, "not-the-secret")
	unknownKey := s3test.AWSDir(t, "nobody", "nothing")
	noSecret := t.TempDir()
	tests := []struct {
		name       string
		reason     string
		key        string
		opts       func(*FetchOptions)
		want       report.RestoreResult
		wantReason string
	}{{
		name:   "s3",
		reason: "our backup, fetched and checked: its revision is the last write's, its release the metadata's",
		want:   good,
	}, {
		name:   "s3 with --sha256",
		reason: "the sha256 the hook knows from the EtcdBackup's status is the object's",
		opts:   func(o *FetchOptions) { o.SHA256 = strings.ToUpper(f.backup.SHA256) },
		want:   good,
	}, {
		name:   "file with metadata",
		reason: "a FileStore backup: its .json gives the release and the sha256 it must have",
		opts:   func(o *FetchOptions) { o.S3, o.File = nil, withMeta },
		want:   report.RestoreResult{Succeeded: true, Source: withMeta, Size: fileBackup.Size, SHA256: fileBackup.SHA256, Revision: f.last, EtcdVersion: etcdtest.Version37},
	}, {
		name:   "bare file",
		reason: "without metadata, the release is the database's storage version, major.minor",
		opts:   func(o *FetchOptions) { o.S3, o.File = nil, bare },
		want:   report.RestoreResult{Succeeded: true, Source: bare, Size: f.backup.Size, SHA256: f.backup.SHA256, Revision: f.last, EtcdVersion: "3.7"},
	}, {
		name:   "already restored",
		reason: "a data dir holding a member is never touched: nothing is fetched, not even a missing object",
		key:    keyMissing,
		opts: func(o *FetchOptions) {
			o.S3.Endpoint = "http://127.0.0.1:1"
			if err := os.MkdirAll(filepath.Join(o.DataDir, "member", "snap"), 0o700); err != nil {
				t.Fatal(err)
			}
		},
		want:       report.RestoreResult{Succeeded: true, AlreadyRestored: true, Source: "s3://" + bucket + "/" + keyMissing},
		wantReason: "already holds a member",
	}, {
		name:       "missing object",
		reason:     "NoSuchKey: the backup is not there, and will not be on a retry",
		key:        keyMissing,
		want:       report.RestoreResult{Permanent: true, Source: "s3://" + bucket + "/" + keyMissing},
		wantReason: "the object does not exist in the bucket",
	}, {
		name:       "missing bucket",
		reason:     "NoSuchBucket is as permanent as a missing key",
		opts:       func(o *FetchOptions) { o.S3.Path = "no-such-bucket/etcd.backup" },
		want:       report.RestoreResult{Permanent: true, Source: "s3://no-such-bucket/etcd.backup"},
		wantReason: `the bucket "no-such-bucket" does not exist`,
	}, {
		name:       "wrong secret",
		reason:     "SignatureDoesNotMatch: the awsSecret is wrong until someone fixes it",
		opts:       func(o *FetchOptions) { o.S3.AWSDir = wrongSecret },
		want:       report.RestoreResult{Permanent: true, Source: source},
		wantReason: "refused the credentials",
	}, {
		name:       "unknown access key",
		reason:     "an access key the store does not know is refused like a wrong secret",
		opts:       func(o *FetchOptions) { o.S3.AWSDir = unknownKey },
		want:       report.RestoreResult{Permanent: true, Source: source},
		wantReason: "refused the credentials",
	}, {
		name:       "no credentials file",
		reason:     "the awsSecret volume is optional: a missing Secret is a missing file, said as such",
		opts:       func(o *FetchOptions) { o.S3.AWSDir = noSecret },
		want:       report.RestoreResult{Permanent: true, Source: source},
		wantReason: `the awsSecret is missing or has no "credentials" key`,
	}, {
		name:       "corrupt object",
		reason:     "one flipped byte fails etcd's trailer",
		key:        keyCorrupt,
		want:       report.RestoreResult{Permanent: true, Source: "s3://" + bucket + "/" + keyCorrupt},
		wantReason: "is corrupt or truncated",
	}, {
		name:       "truncated object",
		reason:     "an object cut short ends in the wrong 32 bytes",
		key:        keyTruncated,
		want:       report.RestoreResult{Permanent: true, Source: "s3://" + bucket + "/" + keyTruncated},
		wantReason: "is corrupt or truncated",
	}, {
		name:       "--sha256 mismatch",
		reason:     "an intact snapshot that is not the one the hook asked for is refused",
		opts:       func(o *FetchOptions) { o.SHA256 = strings.Repeat("ab", 32) },
		want:       report.RestoreResult{Permanent: true, Source: source},
		wantReason: "but the restore asks for " + strings.Repeat("ab", 32),
	}, {
		name:       "stored sha256 mismatch",
		reason:     "an object whose bytes are not those its backup tagged it with was replaced since",
		key:        keyRetagged,
		want:       report.RestoreResult{Permanent: true, Source: "s3://" + bucket + "/" + keyRetagged},
		wantReason: "but the sha256 stored with it says " + strings.Repeat("0", 64),
	}, {
		name:       "newer minor",
		reason:     "a 3.7 snapshot into a 3.6 cluster: etcd 3.6 cannot read 3.7's storage (only a downgrade lowers it, member by member)",
		opts:       func(o *FetchOptions) { o.EtcdVersion = etcdtest.Version36 },
		want:       report.RestoreResult{Permanent: true, Source: source},
		wantReason: "was written by etcd 3.7.3, and the cluster runs etcd 3.6.16",
	}, {
		name:       "newer minor by storage version",
		reason:     "without metadata, the database's own storage version says 3.7",
		opts:       func(o *FetchOptions) { o.S3, o.File, o.EtcdVersion = nil, bare, etcdtest.Version35 },
		want:       report.RestoreResult{Permanent: true, Source: bare},
		wantReason: "was written by etcd 3.7, and the cluster runs etcd 3.5.35",
	}, {
		name:       "older cluster patch",
		reason:     "only the minor release matters: a 3.7.3 snapshot restores into 3.7.0",
		opts:       func(o *FetchOptions) { o.EtcdVersion = "3.7.0" },
		want:       good,
		wantReason: "fetched and verified",
	}, {
		name:       "not bbolt",
		reason:     "bytes with a valid trailer that are not a database",
		key:        keyNotBolt,
		want:       report.RestoreResult{Permanent: true, Source: "s3://" + bucket + "/" + keyNotBolt},
		wantReason: "not an etcd snapshot",
	}, {
		name:       "missing file",
		reason:     "a file source that is not there",
		opts:       func(o *FetchOptions) { o.S3, o.File = nil, filepath.Join(files, "nothing.db") },
		want:       report.RestoreResult{Permanent: true, Source: filepath.Join(files, "nothing.db")},
		wantReason: "does not exist",
	}, {
		name:       "unreachable store",
		reason:     "the network is worth a retry: not permanent",
		opts:       func(o *FetchOptions) { o.S3.Endpoint = "http://127.0.0.1:1" },
		want:       report.RestoreResult{Source: source},
		wantReason: "cannot be reached",
	}, {
		name:       "timeout",
		reason:     "a run that outlives --timeout is retried, and says why it stopped",
		opts:       func(o *FetchOptions) { o.Timeout = time.Nanosecond },
		want:       report.RestoreResult{Source: source},
		wantReason: "the fetch took longer than its timeout of 1ns",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := tt.key
			if key == "" {
				key = f.cfg.Key()
			}
			opts := f.options(t, key)
			if tt.opts != nil {
				tt.opts(&opts)
			}
			got := Fetch(context.Background(), opts)
			t.Logf("reason: %s", got.Reason)
			if d := cmp.Diff(tt.want, got, ignoreReason); d != "" {
				t.Errorf("%s (-want +got):\n%s\nreason: %s", tt.reason, d, got.Reason)
			}
			if !strings.Contains(got.Reason, tt.wantReason) || (!got.Succeeded && !strings.Contains(got.Reason, got.Source)) {
				t.Errorf("%s: reason %q; want it to name the backup and say %q", tt.reason, got.Reason, tt.wantReason)
			}
			f.checkTools(t, opts)
			f.checkPlaced(t, opts, got)
		})
	}
}

// checkTools: the executable was copied, whole and executable.
func (f *restoreFixture) checkTools(t *testing.T, opts FetchOptions) {
	t.Helper()
	p := filepath.Join(opts.ToolsDir, ToolsExecutable)
	data, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(data, f.exe) {
		t.Errorf("tools: %s holds %q (%v), want the executable", p, data, err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("tools: %s mode %v (%v), want 0755", p, fi.Mode(), err)
	}
	entries, _ := os.ReadDir(opts.ToolsDir)
	if len(entries) != 1 {
		t.Errorf("tools dir holds %d entries, want only %s", len(entries), ToolsExecutable)
	}
}

// checkPlaced: a success that fetched left the snapshot and its record; any
// other outcome left nothing at all (no partial file either).
func (f *restoreFixture) checkPlaced(t *testing.T, opts FetchOptions, got report.RestoreResult) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Dir(opts.Snapshot))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	var want []string
	if got.Succeeded && !got.AlreadyRestored {
		want = []string{"snapshot.db", "snapshot.db.json"}
		var rec report.RestoreResult
		data, _ := os.ReadFile(opts.Snapshot + ".json")
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Errorf("record: %v", err)
		}
		if d := cmp.Diff(got, rec, ignoreReason); d != "" {
			t.Errorf("the record beside the snapshot is not the result (-result +record):\n%s", d)
		}
	}
	if d := cmp.Diff(want, names); d != "" {
		t.Errorf("files beside the snapshot (-want +got):\n%s", d)
	}
}

// TestFetchRerun: a rerun (a restarted Pod sandbox) reuses the snapshot the
// first run verified, without the store; one that no longer checks out, or
// is not the one asked for, is fetched again; a partial download left by a
// killed run goes.
func TestFetchRerun(t *testing.T) {
	f := newRestoreFixture(t)
	opts := f.options(t, f.cfg.Key())
	first := Fetch(context.Background(), opts)
	if !first.Succeeded {
		t.Fatal(first.Reason)
	}
	before, err := os.Stat(opts.Snapshot)
	if err != nil {
		t.Fatal(err)
	}

	// The store is unreachable now: only a reuse can succeed.
	offline := opts
	offline.S3 = &S3Source{Path: opts.S3.Path, Endpoint: "http://127.0.0.1:1", ForcePathStyle: true, AWSDir: t.TempDir()}
	partial := opts.Snapshot + ".partial-12345"
	if err := os.WriteFile(partial, []byte("left by a killed run"), 0o644); err != nil {
		t.Fatal(err)
	}
	second := Fetch(context.Background(), offline)
	if d := cmp.Diff(first, second, ignoreReason); d != "" {
		t.Errorf("a rerun reports another snapshot (-first +second):\n%s", d)
	}
	after, err := os.Stat(opts.Snapshot)
	if err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the snapshot was written again (mtime %v, was %v; %v)", after.ModTime(), before.ModTime(), err)
	}
	withSHA := offline
	withSHA.SHA256 = first.SHA256
	if res := Fetch(context.Background(), withSHA); !res.Succeeded {
		t.Errorf("a rerun with the snapshot's --sha256: %s", res.Reason)
	}

	// Another backup asked for: the verified snapshot is not it.
	other := offline
	other.SHA256 = strings.Repeat("cd", 32)
	// It goes to the store, and meets the missing awsSecret.
	if res := Fetch(context.Background(), other); res.Succeeded || !strings.Contains(res.Reason, "awsSecret is missing") {
		t.Errorf("a rerun asking for another sha256 reused the snapshot: %+v", res)
	}

	// The placed snapshot got damaged: not reused, fetched again.
	data, _ := os.ReadFile(opts.Snapshot)
	data[len(data)/3] ^= 1
	if err := os.WriteFile(opts.Snapshot, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := Fetch(context.Background(), offline); res.Succeeded {
		t.Errorf("a damaged snapshot was reused: %+v", res)
	}
	third := Fetch(context.Background(), opts)
	if d := cmp.Diff(first, third, ignoreReason); d != "" || !strings.Contains(third.Reason, "fetched and verified") {
		t.Errorf("a fetch over a damaged snapshot (-first +third):\n%s\nreason: %s", d, third.Reason)
	}
	f.checkPlaced(t, opts, third)
	if _, err := os.Stat(partial); !os.IsNotExist(err) {
		t.Errorf("the partial download of a killed run is still there: %v", err)
	}
}

// TestWriteRestoreResult: the kubelet keeps at most 4096 bytes of a
// termination message; a long reason is cut, the rest kept.
func TestWriteRestoreResult(t *testing.T) {
	p := filepath.Join(t.TempDir(), "termination-log")
	want := report.RestoreResult{Permanent: true, Source: "s3://b/k", Reason: strings.Repeat("why ", 3000)}
	if err := WriteRestoreResult(p, want); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	var got report.RestoreResult
	if err := json.Unmarshal(data, &got); err != nil || len(data) > 4096 {
		t.Fatalf("%d bytes: %v", len(data), err)
	}
	if d := cmp.Diff(want, got, ignoreReason); d != "" || !strings.HasPrefix(got.Reason, "why why") {
		t.Errorf("(-want +got):\n%s", d)
	}
	for _, k := range []string{"succeeded", "permanent", "reason", "source", "size", "sha256", "revision", "etcdVersion", "alreadyRestored"} {
		if !bytes.Contains(data, []byte(`"`+k+`":`)) {
			t.Errorf("the message has no %q: %s", k, data[:200])
		}
	}
}
