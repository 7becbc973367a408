package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// These tests restore what the archiver stored, with etcd's own etcdutl
// and etcd, and compare the restored keys with the live cluster's at the
// target revision: value, create and mod revision, version and lease.

type kvAt struct {
	Value                            string
	Create, Mod, Version, Lease, TTL int64
}

// state is every key at rev (0: now) with its lease's granted TTL.
func state(t *testing.T, cli *clientv3.Client, rev int64) map[string]kvAt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]kvAt{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kvAt{Value: string(kv.Value), Create: kv.CreateRevision, Mod: kv.ModRevision, Version: kv.Version, Lease: kv.Lease}
	}
	return out
}

// restored restores the snapshot file with etcdutl into a new member and
// returns its keys, each with its lease's granted TTL.
func restored(t *testing.T, snapshot string) map[string]kvAt {
	t.Helper()
	dir := t.TempDir()
	opts, out := applyOptions(t, testenv.Binary(t, testenv.Etcdutl(etcdtest.Version37)), dir)
	if err := os.MkdirAll(filepath.Dir(opts.Snapshot), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(opts.Snapshot, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if res := apply(t, opts, out); !res.Succeeded {
		t.Fatalf("etcdutl refused the rebuilt snapshot: %s", res.Reason)
	}
	_, cli := startRestored(t, etcdtest.Version37, opts.DataDir)
	got := state(t, cli, 0)
	for k, kv := range got {
		if kv.Lease != 0 {
			ttl, err := cli.TimeToLive(context.Background(), clientv3.LeaseID(kv.Lease))
			if err != nil {
				t.Fatal(err)
			}
			kv.TTL = ttl.GrantedTTL
			got[k] = kv
		}
	}
	return got
}

func TestRestoreChain(t *testing.T) {
	r := newArchiveRig(t)
	r.writes(t, "/base", 20)
	run := r.start(t, func(o *ArchiveOptions) { o.HashInterval = time.Nanosecond })
	// A key on a 2-second lease: alive at the target, and expired (etcd
	// deletes it) long before the restore replays it.
	ctx := context.Background()
	brief, err := r.cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	put, err := r.cli.Put(ctx, "/brief", "alive at the target", clientv3.WithLease(brief.ID))
	if err != nil {
		t.Fatal(err)
	}
	mid := r.writes(t, "/one", 150)
	time.Sleep(3 * time.Second)
	last := r.writes(t, "/two", 150)
	if got := state(t, r.cli, 0); got["/brief"] != (kvAt{}) {
		t.Fatal("the 2-second lease did not expire")
	}
	waitStored(t, run.a, last)
	run.stop()
	h, _ := r.stored(t, nil)
	snap := h.Snapshots[0].To

	cases := []struct {
		name, reason string
		target       archive.Target
		want         int64
	}{
		{"a revision in the middle", "every write up to it and none after; the leased key alive then is there, with its lease's TTL", archive.Target{Revision: mid - 3}, mid - 3},
		{"the newest", "no target: everything stored", archive.Target{}, last},
		{"the snapshot's own", "the snapshot alone", archive.Target{Revision: snap}, snap},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "snapshot.db")
			res, err := RestoreChain(ctx, ChainSource{Store: r.store, Base: archiveBase, Target: tc.target}, t.TempDir(), out)
			if err != nil {
				t.Fatal(err)
			}
			if res.Revision != tc.want {
				t.Errorf("rebuilt at revision %d, want %d", res.Revision, tc.want)
			}
			// Every delta carries the cluster's HashKV at its last revision
			// (HashInterval 1ns): each one the path ends before the target
			// is compared. A target within a delta is checked event by
			// event after the last of them.
			checkpoints := 0
			for _, d := range h.Deltas {
				if d.To > snap && d.To <= tc.want {
					checkpoints++
				}
			}
			if res.Hashes == 0 && checkpoints > 0 {
				t.Errorf("no HashKV checkpoint compared on the way, of %d: %+v", checkpoints, res)
			}
			want := state(t, r.cli, tc.want)
			for k, kv := range want {
				if kv.Lease == int64(brief.ID) {
					kv.TTL = 2
				} else if kv.Lease != 0 {
					kv.TTL = map[bool]int64{true: 600, false: 60}[bytes.Contains([]byte(k), []byte("/leased/"))]
				}
				want[k] = kv
			}
			if diff := cmp.Diff(want, restored(t, out)); diff != "" {
				t.Errorf("%s (-live at %d +restored):\n%s", tc.reason, tc.want, diff)
			}
			if tc.want >= put.Header.Revision && tc.want < last {
				if _, ok := want["/brief"]; !ok {
					t.Error("the test is wrong: /brief is not alive at the target")
				}
			}
		})
	}
}

// A moment: the newest revision seen committed by then. The writes stop
// around it, so that which side of it each falls on is not a matter of
// milliseconds.
func TestRestoreChainToTime(t *testing.T) {
	r := newArchiveRig(t)
	run := r.start(t, nil)
	before := r.writes(t, "/before", 50)
	time.Sleep(300 * time.Millisecond)
	moment := time.Now()
	time.Sleep(300 * time.Millisecond)
	last := r.writes(t, "/after", 50)
	waitStored(t, run.a, last)
	run.stop()
	out := filepath.Join(t.TempDir(), "snapshot.db")
	res, err := RestoreChain(context.Background(), ChainSource{Store: r.store, Base: archiveBase, Target: archive.Target{Time: moment}}, t.TempDir(), out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision != before {
		t.Errorf("rebuilt at revision %d; the last write before the moment was %d, the first after it %d", res.Revision, before, before+1)
	}
	if diff := cmp.Diff(state(t, r.cli, before), restored(t, out), cmpIgnoreTTL); diff != "" {
		t.Errorf("(-live at %d +restored):\n%s", before, diff)
	}
}

var cmpIgnoreTTL = cmp.Transformer("noTTL", func(kv kvAt) kvAt { kv.TTL = 0; return kv })

// Refused, with the reason, and nothing written.
func TestRestoreChainRefuses(t *testing.T) {
	r := newArchiveRig(t)
	key := bytes.Repeat([]byte{9}, archive.KeySize)
	// Writes before the archiver starts, so that its first snapshot is
	// above revision 1 and "before the oldest" has a revision to ask for.
	// Without them the snapshot may be taken at revision 1 itself.
	r.writes(t, "/early", 5)
	run := r.start(t, func(o *ArchiveOptions) { o.Key = key })
	last := r.writes(t, "/a", 100)
	waitStored(t, run.a, last)
	run.stop()
	h, _ := r.stored(t, key)
	if oldest := h.Snapshots[0].From; oldest <= 1 {
		t.Fatalf("the oldest snapshot is at revision %d: the test needs one above revision 1", oldest)
	}
	damaged := t.TempDir()
	damagedStore, err := NewFileStore(damaged, "backups")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(damaged, os.DirFS(r.root)); err != nil {
		t.Fatal(err)
	}
	delta := filepath.Join(damaged, h.Deltas[len(h.Deltas)/2].Key)
	data, err := os.ReadFile(delta)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(delta, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, reason string
		src          ChainSource
		want         error
	}{
		{"wrong key", "named as such", ChainSource{Store: r.store, Base: archiveBase, Key: bytes.Repeat([]byte{1}, archive.KeySize)}, archive.ErrWrongKey},
		{"no key", "an encrypted chain needs spec.encryption", ChainSource{Store: r.store, Base: archiveBase}, nil},
		{"flipped byte", "a damaged delta fails its chunk's tag", ChainSource{Store: damagedStore, Base: archiveBase, Key: key}, archive.ErrTampered},
		{"before the oldest", "the oldest snapshot bounds what can be restored", ChainSource{Store: r.store, Base: archiveBase, Key: key, Target: archive.Target{Revision: 1}}, archive.ErrBeforeOldest},
		{"after the newest", "nothing holds it", ChainSource{Store: r.store, Base: archiveBase, Key: key, Target: archive.Target{Revision: last + 1}}, archive.ErrAfterNewest},
		{"another history", "no chain of that cluster", ChainSource{Store: r.store, Base: archiveBase, Key: key, History: "00000000000000ff"}, archive.ErrEmpty},
	}
	for _, tc := range cases {
		out := filepath.Join(t.TempDir(), "snapshot.db")
		_, err := RestoreChain(context.Background(), tc.src, t.TempDir(), out)
		switch {
		case err == nil:
			t.Errorf("%s (%s): restored", tc.name, tc.reason)
		case !isUnusable(err):
			t.Errorf("%s (%s): %v is not reported as the backup's own failure", tc.name, tc.reason, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s (%s): %v, want %v", tc.name, tc.reason, err, tc.want)
		}
		if exists(out) {
			t.Errorf("%s: a snapshot was written", tc.name)
		}
		t.Logf("%s: %v", tc.name, err)
	}
}

// The restore fetch of a continuous backup, from a volume and from S3
// (versitygw): the backup's key, or a snapshot's key naming its history.
func TestFetchChain(t *testing.T) {
	r := newArchiveRig(t)
	f := &fixture{etcd: r.etcd, s3: s3test.Start(t)}
	f.s3.CreateBucket(t, bucket)
	f.cfg = f.config(t, s3test.AccessKey, s3test.SecretKey)
	f.store = f.storeFor(t, f.cfg)
	volume := r.start(t, nil)
	s3run := r.startOn(t, f.store, f.cfg.Key(), nil)
	target := r.writes(t, "/one", 80)
	last := r.writes(t, "/two", 80)
	waitStored(t, volume.a, last)
	waitStored(t, s3run.a, last)
	volume.stop()
	s3run.stop()
	h, _ := r.stored(t, nil)
	awsDir := s3test.AWSDir(t, s3test.AccessKey, s3test.SecretKey)
	s3src := func(path string) *S3Source {
		return &S3Source{Path: path, Endpoint: f.s3.URL, ForcePathStyle: true, AWSDir: awsDir}
	}
	cases := []struct {
		name string
		opts FetchOptions
	}{
		{"volume, the backup's key", FetchOptions{File: filepath.Join(r.root, archiveBase)}},
		{"volume, a snapshot's key", FetchOptions{File: filepath.Join(r.root, h.Snapshots[0].Key)}},
		{"S3, the backup's key", FetchOptions{S3: s3src(f.cfg.Path)}},
	}
	want := state(t, r.cli, target)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := tc.opts
			opts.Chain = &ChainFetch{Target: archive.Target{Revision: target}}
			opts.EtcdVersion, opts.DataDir, opts.Snapshot = etcdtest.Version37, filepath.Join(dir, "data"), filepath.Join(dir, "restore", "snapshot.db")
			res := Fetch(context.Background(), opts)
			if !res.Succeeded || res.Revision != target || res.Deltas == 0 || res.History == "" {
				t.Fatalf("fetch: %+v", res)
			}
			if diff := cmp.Diff(want, restored(t, opts.Snapshot), cmpIgnoreTTL); diff != "" {
				t.Errorf("(-live at %d +restored):\n%s", target, diff)
			}
			// A rerun reuses what the first verified.
			again := Fetch(context.Background(), opts)
			if !again.Succeeded || again.Revision != target || !strings.Contains(again.Reason, "earlier run") {
				t.Errorf("rerun: %+v", again)
			}
		})
	}
}
