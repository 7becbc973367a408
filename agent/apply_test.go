package agent

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// These tests restore with the real etcdutl (and etcdctl) of each built
// release, and start that release's etcd on the result: the data dir's
// layout is etcd's, and only etcd can say it is right.

const restoredKeys = 200

// snapshotOf backs up a fresh cluster of version holding restoredKeys
// keys, and returns the snapshot and its revision.
func snapshotOf(t *testing.T, version string) (string, int64) {
	t.Helper()
	f := &fixture{etcd: etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: version})}
	rev := f.put(t, "/restored/", restoredKeys)
	dir := t.TempDir()
	store, err := NewFileStore(dir, "backups")
	if err != nil {
		t.Fatal(err)
	}
	res := Backup(context.Background(), BackupOptions{Endpoints: f.etcd.Endpoints(), Timeout: time.Minute}, store, "snapshot.db")
	if !res.Succeeded || res.EtcdRevision != rev {
		t.Fatalf("backup: %+v, want revision %d", res, rev)
	}
	return filepath.Join(dir, "snapshot.db"), rev
}

// place puts the snapshot where restore fetch would, with its record.
func place(t *testing.T, snapshot, dst string) {
	t.Helper()
	data, err := os.ReadFile(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recordPath(dst), []byte(`{"succeeded":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

// applyOptions restores dir/restore/snapshot.db into dir/data with etcdutl.
func applyOptions(t *testing.T, etcdutl, dir string) (ApplyOptions, *bytes.Buffer) {
	peer := etcdtest.FreeURL(t)
	out := &bytes.Buffer{}
	return ApplyOptions{
		Etcdutl:                  etcdutl,
		Snapshot:                 filepath.Join(dir, "restore", "snapshot.db"),
		DataDir:                  filepath.Join(dir, "data"),
		Name:                     "restored",
		InitialCluster:           "restored=" + peer,
		InitialClusterToken:      "restored-token",
		InitialAdvertisePeerURLs: peer,
		Output:                   out,
	}, out
}

func apply(t *testing.T, opts ApplyOptions, out *bytes.Buffer) report.RestoreResult {
	t.Helper()
	res := Apply(context.Background(), opts)
	t.Logf("reason: %s", res.Reason)
	if !res.Succeeded {
		t.Logf("tool output:\n%s", out)
	}
	return res
}

// startRestored starts version's etcd on a restored data dir. The flags
// StartCluster generates are overridden: etcd keeps a flag's last value,
// and on a data dir with a WAL it ignores the bootstrap flags.
func startRestored(t *testing.T, version, dataDir string) (*etcdtest.Cluster, *clientv3.Client) {
	t.Helper()
	c := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: version, ExtraArgs: []string{"--data-dir=" + dataDir, "--name=restored"}})
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return c, cli
}

func countKeys(t *testing.T, cli *clientv3.Client) (int64, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := cli.Get(ctx, "/restored/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return got.Count, got.Header.Revision
}

// listing is every file and directory under root with its mode, size and
// mtime: what "changes nothing" is checked against. Without dirTimes, a
// directory's mtime is left out: a failed run may create and remove an
// entry (its restore in progress) and so touch its parent.
func listing(t *testing.T, root string, dirTimes bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && !dirTimes {
			out = append(out, fmt.Sprintf("%s %v", rel, fi.Mode()))
			return nil
		}
		out = append(out, fmt.Sprintf("%s %v %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestApply, for each release: the snapshot restored by its etcdutl holds
// every key at the snapshot's revision, and starts as a member; a rerun
// over the member's data changes nothing; a bumped restore is ahead by the
// bump and compacted; an interrupted restore's leftovers go.
func TestApply(t *testing.T) {
	for i, version := range etcdtest.BuiltVersions {
		t.Run(version, func(t *testing.T) {
			etcdutl := testenv.Binary(t, testenv.Etcdutl(version))
			snapshot, rev := snapshotOf(t, version)

			t.Run("restore, then nothing", func(t *testing.T) {
				dir := t.TempDir()
				opts, out := applyOptions(t, etcdutl, dir)
				place(t, snapshot, opts.Snapshot)
				res := apply(t, opts, out)
				if d := cmp.Diff(report.RestoreResult{Succeeded: true, Source: opts.Snapshot}, res, ignoreReason); d != "" {
					t.Fatalf("(-want +got):\n%s", d)
				}
				for _, p := range []string{opts.Snapshot, recordPath(opts.Snapshot), opts.DataDir + restoringSuffix} {
					if exists(p) {
						t.Errorf("%s is left after the restore", p)
					}
				}
				c, cli := startRestored(t, version, opts.DataDir)
				if n, r := countKeys(t, cli); n != restoredKeys || r != rev {
					t.Errorf("restored: %d keys at revision %d; want %d at the snapshot's %d", n, r, restoredKeys, rev)
				}
				if _, err := cli.Put(context.Background(), "/written/after", "restore"); err != nil {
					t.Fatal(err)
				}
				c.Stop(0)

				// A sandbox restart: the snapshot placed again by a fetch
				// that ran before it saw the member (or left by a crash).
				place(t, snapshot, opts.Snapshot)
				before := listing(t, dir, true)
				again := apply(t, opts, out)
				if d := cmp.Diff(report.RestoreResult{Succeeded: true, AlreadyRestored: true, Source: opts.Snapshot}, again, ignoreReason); d != "" {
					t.Errorf("a rerun over the member's data (-want +got):\n%s", d)
				}
				if d := cmp.Diff(before, listing(t, dir, true)); d != "" {
					t.Errorf("a rerun over the member's data changed files (-before +after):\n%s", d)
				}
			})

			t.Run("bump revision", func(t *testing.T) {
				dir := t.TempDir()
				opts, out := applyOptions(t, etcdutl, dir)
				opts.BumpRevision, opts.MarkCompacted = 1_000_000_000, true
				place(t, snapshot, opts.Snapshot)
				if res := apply(t, opts, out); !res.Succeeded {
					t.Fatal(res.Reason)
				}
				_, cli := startRestored(t, version, opts.DataDir)
				if n, r := countKeys(t, cli); n != restoredKeys || r <= rev+1_000_000_000-1 {
					t.Errorf("restored: %d keys at revision %d; want %d at a revision above %d", n, r, restoredKeys, rev+1_000_000_000-1)
				}
				// Watchers that saw revisions up to the old one must relist.
				_, err := cli.Get(context.Background(), "/restored/", clientv3.WithRev(rev))
				if err == nil || !strings.Contains(err.Error(), "compacted") {
					t.Errorf("a read at the snapshot's revision: %v, want it compacted", err)
				}
			})

			t.Run("bump above the replaced history", func(t *testing.T) {
				// A snapshot older than an earlier restore: the history it
				// replaces reached far past the snapshot's revision plus the
				// bump, and the restored store must start above that.
				const bump, replaced = 1_000, 5_000_000_000
				dir := t.TempDir()
				opts, out := applyOptions(t, etcdutl, dir)
				opts.BumpRevision, opts.MarkCompacted, opts.ReplacedRevision = bump, true, replaced
				place(t, snapshot, opts.Snapshot)
				if res := apply(t, opts, out); !res.Succeeded {
					t.Fatal(res.Reason)
				}
				_, cli := startRestored(t, version, opts.DataDir)
				if n, r := countKeys(t, cli); n != restoredKeys || r < replaced+bump {
					t.Errorf("restored: %d keys at revision %d; want %d at a revision of at least %d", n, r, restoredKeys, int64(replaced+bump))
				}
				_, err := cli.Get(context.Background(), "/restored/", clientv3.WithRev(replaced))
				if err == nil || !strings.Contains(err.Error(), "compacted") {
					t.Errorf("a read at the replaced history's revision: %v, want it compacted", err)
				}
			})

			t.Run("interrupted restore", func(t *testing.T) {
				dir := t.TempDir()
				opts, out := applyOptions(t, etcdutl, dir)
				place(t, snapshot, opts.Snapshot)
				// A killed run's half-written restore, and the empty data dir
				// a fresh volume (or the Pod spec) provides.
				junk := filepath.Join(opts.DataDir+restoringSuffix, "member", "wal", "0000000000000000-0000000000000000.wal")
				if err := os.MkdirAll(filepath.Dir(junk), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(junk, []byte("half"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(opts.DataDir, 0o700); err != nil {
					t.Fatal(err)
				}
				if res := apply(t, opts, out); !res.Succeeded {
					t.Fatal(res.Reason)
				}
				if exists(opts.DataDir+restoringSuffix) || !exists(filepath.Join(opts.DataDir, "member", "snap", "db")) {
					t.Errorf("after the restore: %v", listing(t, dir, false))
				}
				if data, _ := os.ReadFile(filepath.Join(opts.DataDir, "member", "wal", filepath.Base(junk))); string(data) == "half" {
					t.Error("the interrupted restore's WAL made it into the data dir")
				}
				_, cli := startRestored(t, version, opts.DataDir)
				if n, _ := countKeys(t, cli); n != restoredKeys {
					t.Errorf("restored: %d keys, want %d", n, restoredKeys)
				}
			})

			if i > 0 {
				// A snapshot of the line before, restored by this line's
				// etcdutl into a cluster of this line: what a restore after
				// an upgrade does with the backups taken before it.
				older := etcdtest.BuiltVersions[i-1]
				t.Run("snapshot of "+older, func(t *testing.T) {
					snapshot, rev := snapshotOf(t, older)
					dir := t.TempDir()
					opts, out := applyOptions(t, etcdutl, dir)
					place(t, snapshot, opts.Snapshot)
					if res := apply(t, opts, out); !res.Succeeded {
						t.Fatal(res.Reason)
					}
					_, cli := startRestored(t, version, opts.DataDir)
					if n, r := countKeys(t, cli); n != restoredKeys || r != rev {
						t.Errorf("restored: %d keys at revision %d; want %d at the snapshot's %d", n, r, restoredKeys, rev)
					}
				})
			}

			if version != etcdtest.Version35 {
				return
			}
			t.Run("etcdctl", func(t *testing.T) {
				// Releases before 3.5 have no etcdutl; 3.5's etcdctl still
				// restores, so the --etcdctl path runs against a real one.
				dir := t.TempDir()
				opts, out := applyOptions(t, "", dir)
				opts.Etcdctl = testenv.Binary(t, testenv.Etcdctl(version))
				place(t, snapshot, opts.Snapshot)
				if res := apply(t, opts, out); !res.Succeeded {
					t.Fatal(res.Reason)
				}
				_, cli := startRestored(t, version, opts.DataDir)
				if n, _ := countKeys(t, cli); n != restoredKeys {
					t.Errorf("restored: %d keys, want %d", n, restoredKeys)
				}
			})
		})
	}
}

// TestApplyRefuses: a restore that cannot be made fails with a reason and
// leaves the data dir as it found it, and no restore in progress behind.
func TestApplyRefuses(t *testing.T) {
	etcdutl := testenv.Binary(t, testenv.Etcdutl(etcdtest.Version37))
	snapshot, _ := snapshotOf(t, etcdtest.Version37)
	tests := []struct {
		name       string
		reason     string
		prepare    func(t *testing.T, o *ApplyOptions)
		wantReason string
	}{{
		name:   "files in the data dir",
		reason: "a data dir holding something that is not a member is not ours to replace",
		prepare: func(t *testing.T, o *ApplyOptions) {
			if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(o.DataDir, "notes.txt"), []byte("mine"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		wantReason: `holds "notes.txt" but no member directory`,
	}, {
		name:       "no snapshot",
		reason:     "the fetch step did not place one",
		prepare:    func(t *testing.T, o *ApplyOptions) { _ = os.Remove(o.Snapshot) },
		wantReason: "the snapshot to restore is not there",
	}, {
		name:   "corrupt snapshot",
		reason: "etcdutl's own refusal is the reason, with its last words",
		prepare: func(t *testing.T, o *ApplyOptions) {
			data, _ := os.ReadFile(o.Snapshot)
			data[len(data)/2] ^= 0xff
			if err := os.WriteFile(o.Snapshot, data, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		wantReason: "etcdutl snapshot restore of",
	}, {
		name:       "no tool",
		reason:     "a tools path that is not there",
		prepare:    func(t *testing.T, o *ApplyOptions) { o.Etcdutl = filepath.Join(t.TempDir(), "etcdutl") },
		wantReason: "etcdutl snapshot restore of",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts, out := applyOptions(t, etcdutl, dir)
			place(t, snapshot, opts.Snapshot)
			tt.prepare(t, &opts)
			before := listing(t, dir, false)
			res := apply(t, opts, out)
			if res.Succeeded || res.AlreadyRestored || !strings.Contains(res.Reason, tt.wantReason) {
				t.Errorf("%s: %+v; want a failure saying %q", tt.reason, res, tt.wantReason)
			}
			if d := cmp.Diff(before, listing(t, dir, false)); d != "" {
				t.Errorf("%s: a failed restore changed files (-before +after):\n%s", tt.reason, d)
			}
		})
	}
}

// TestApplyValidate: flags the hook renders wrong are refused before
// anything runs, each with what is wrong.
func TestApplyValidate(t *testing.T) {
	ok := ApplyOptions{Etcdutl: "/usr/local/bin/etcdutl", Snapshot: "/var/etcd/restore/snapshot.db", DataDir: "/var/etcd/data",
		Name: "m0", InitialCluster: "m0=http://m0:2380", InitialAdvertisePeerURLs: "http://m0:2380"}
	tests := []struct {
		name    string
		reason  string
		change  func(*ApplyOptions)
		wantErr string
	}{
		{name: "ok", reason: "what the hook renders", change: func(*ApplyOptions) {}},
		{name: "both tools", reason: "one release has one tool", change: func(o *ApplyOptions) { o.Etcdctl = "/usr/local/bin/etcdctl" }, wantErr: "--etcdutl and --etcdctl name two tools"},
		{name: "no tool", reason: "nothing to restore with", change: func(o *ApplyOptions) { o.Etcdutl = "" }, wantErr: "no restore tool"},
		{name: "no name", reason: "etcdutl would name the member \"default\"", change: func(o *ApplyOptions) { o.Name = "" }, wantErr: "--name is required"},
		{name: "root data dir", reason: "there is no beside for /", change: func(o *ApplyOptions) { o.DataDir = "/" }, wantErr: "is a root directory"},
		{name: "bump alone", reason: "etcd refuses --bump-revision without --mark-compacted", change: func(o *ApplyOptions) { o.BumpRevision = 10 }, wantErr: "--bump-revision needs --mark-compacted"},
		{name: "replaced revision without a bump", reason: "the bump is what lifts the store above the replaced history", change: func(o *ApplyOptions) { o.ReplacedRevision = 10 }, wantErr: "--replaced-revision needs a --bump-revision"},
		{name: "replaced revision that overflows", reason: "etcd's revision is an int64", change: func(o *ApplyOptions) {
			o.BumpRevision, o.MarkCompacted, o.ReplacedRevision = 1_000_000_000, true, math.MaxInt64-10
		}, wantErr: "overflows"},
		{name: "compacted alone", reason: "and --mark-compacted without a bump", change: func(o *ApplyOptions) { o.MarkCompacted = true }, wantErr: "--mark-compacted needs a --bump-revision"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.change(&o)
			err := o.Validate()
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("%s: %v, want %q", tt.reason, err, tt.wantErr)
			}
		})
	}
	if res := Apply(context.Background(), ApplyOptions{}); res.Succeeded || !strings.Contains(res.Reason, "no restore tool") {
		t.Errorf("Apply with no options: %+v", res)
	}
}
