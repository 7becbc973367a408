package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
)

// These tests run the archiver against a real etcd and a volume store:
// what it stores is checked against etcd's own history, read by a watch of
// the test's from the first revision.

const archiveBase = "clusters/demo/etcd.backup"

type archiveRig struct {
	etcd  *etcdtest.Cluster
	cli   *clientv3.Client
	root  string
	store *FileStore
}

func newArchiveRig(t *testing.T) *archiveRig {
	t.Helper()
	r := &archiveRig{etcd: etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: etcdtest.Version37}), root: t.TempDir()}
	var err error
	if r.store, err = NewFileStore(r.root, "backups"); err != nil {
		t.Fatal(err)
	}
	if r.cli, err = newClientFor(r.etcd.Endpoints(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cli.Close() })
	return r
}

// running is one archiver in its own goroutine; stop ends it and waits.
type running struct {
	a    *Archiver
	stop func()
}

func (r *archiveRig) start(t *testing.T, edit func(*ArchiveOptions)) running {
	t.Helper()
	return r.startOn(t, r.store, archiveBase, edit)
}

// startOn runs an archiver of the rig's cluster on another store.
func (r *archiveRig) startOn(t *testing.T, store Store, base string, edit func(*ArchiveOptions)) running {
	t.Helper()
	opts := ArchiveOptions{Endpoints: r.etcd.Endpoints(), Base: base, DeltaInterval: time.Second, SpoolDir: t.TempDir()}
	if edit != nil {
		edit(&opts)
	}
	a, err := NewArchiver(opts, store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once bool
	stop := func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("archiver: %v", err)
		}
	}
	t.Cleanup(stop)
	return running{a, stop}
}

// writes makes every kind of change: puts, overwrites, a transaction of
// several, deletes, keys on a lease, and the lease revoked (its keys
// deleted by etcd). It returns the revision of the last.
func (r *archiveRig) writes(t *testing.T, prefix string, n int) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := r.cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	short, err := r.cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	var rev int64
	for i := range n {
		key := fmt.Sprintf("%s/%03d", prefix, i%17)
		var resp any
		switch i % 6 {
		case 0, 1:
			resp, err = r.cli.Put(ctx, key, fmt.Sprintf("v%d", i))
		case 2:
			resp, err = r.cli.Txn(ctx).Then(clientv3.OpPut(key, "txn-a"), clientv3.OpPut(key+"/b", "txn-b"), clientv3.OpDelete(key+"/c")).Commit()
		case 3:
			resp, err = r.cli.Delete(ctx, key)
		case 4:
			resp, err = r.cli.Put(ctx, prefix+"/leased/"+key, "kept", clientv3.WithLease(lease.ID))
		case 5:
			resp, err = r.cli.Put(ctx, prefix+"/short/"+key, "gone", clientv3.WithLease(short.ID))
		}
		if err != nil {
			t.Fatal(err)
		}
		rev = headerOf(resp).GetRevision()
	}
	rv, err := r.cli.Revoke(ctx, short.ID)
	if err != nil {
		t.Fatal(err)
	}
	return max(rev, rv.Header.Revision)
}

func headerOf(resp any) interface{ GetRevision() int64 } {
	switch r := resp.(type) {
	case *clientv3.PutResponse:
		return r.Header
	case *clientv3.TxnResponse:
		return r.Header
	case *clientv3.DeleteResponse:
		return r.Header
	}
	panic(fmt.Sprintf("%T", resp))
}

// waitStored waits until the archiver has stored revision rev.
func waitStored(t *testing.T, a *Archiver, rev int64) report.ArchiveStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := a.Status()
		if st.LastDeltaRevision >= rev {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d not stored after 30s: %+v", rev, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// truth is etcd's own history from revision from to to, by revision.
func (r *archiveRig) truth(t *testing.T, from, to int64) map[int64][]archive.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[int64][]archive.Event{}
	for resp := range r.cli.Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			e := archive.Event{Type: archive.Delete, Key: ev.Kv.Key}
			if ev.Type == mvccpb.Event_PUT {
				e = archive.Event{Type: archive.Put, Key: ev.Kv.Key, Value: ev.Kv.Value, CreateRevision: ev.Kv.CreateRevision, Version: ev.Kv.Version, Lease: ev.Kv.Lease}
			}
			out[ev.Kv.ModRevision] = append(out[ev.Kv.ModRevision], e)
		}
		if resp.Header.Revision >= to && len(out) > 0 && slices.Max(slicesKeys(out)) >= to {
			break
		}
	}
	return out
}

func slicesKeys(m map[int64][]archive.Event) []int64 {
	var out []int64
	for k := range m {
		out = append(out, k)
	}
	return out
}

// stored reads every delta of the store's newest history, opened with key.
func (r *archiveRig) stored(t *testing.T, key []byte) (archive.History, map[string]*archive.Delta) {
	t.Helper()
	objs, err := r.store.List(context.Background(), archiveBase+archive.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var listing []archive.Listed
	for _, o := range objs {
		listing = append(listing, archive.Listed{Key: o.Key, Size: o.Size, Modified: o.LastModified})
	}
	hs := archive.Histories(archiveBase, listing)
	if len(hs) != 1 {
		t.Fatalf("%d histories in the store, want 1: %v", len(hs), listing)
	}
	deltas := map[string]*archive.Delta{}
	for _, o := range hs[0].Deltas {
		d, err := decodeStoredDelta(r.root, o, key)
		if err != nil {
			t.Fatalf("%s: %v", o.Key, err)
		}
		deltas[o.Key] = d
	}
	return hs[0], deltas
}

func decodeStoredDelta(root string, o archive.Object, key []byte) (*archive.Delta, error) {
	f, err := os.Open(filepath.Join(root, o.Key))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var in io.Reader = f
	if o.Sealed {
		if in, err = archive.NewOpener(f, key, o.Name); err != nil {
			return nil, err
		}
	}
	d, err := archive.DecodeDelta(in)
	if err == nil && (d.From != o.From || d.To != o.To || d.History != o.History) {
		err = fmt.Errorf("holds %s %d-%d, named %s %d-%d", d.History, d.From, d.To, o.History, o.From, o.To)
	}
	return d, err
}

// replayable checks that every revision from the snapshot to last is
// reachable by Select, and that the events stored for each are etcd's.
func checkChain(t *testing.T, h archive.History, deltas map[string]*archive.Delta, truth map[int64][]archive.Event, last int64) {
	t.Helper()
	p, err := archive.Select(h, archive.Target{Revision: last})
	if err != nil {
		t.Fatalf("no path to revision %d: %v", last, err)
	}
	got := map[int64][]archive.Event{}
	for _, o := range p.Deltas {
		for _, r := range deltas[o.Key].Revisions {
			if prev, ok := got[r.Revision]; ok && !cmp.Equal(prev, r.Events, cmpopts.EquateEmpty()) {
				t.Errorf("revision %d is stored twice, differently", r.Revision)
			}
			got[r.Revision] = r.Events
		}
	}
	for rev := p.Snapshot.To + 1; rev <= last; rev++ {
		if diff := cmp.Diff(truth[rev], got[rev], cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("revision %d (-etcd +stored):\n%s", rev, diff)
		}
	}
}

func TestArchiverStoresEveryChange(t *testing.T) {
	r := newArchiveRig(t)
	first := r.writes(t, "/before", 30) // in the first snapshot
	run := r.start(t, nil)
	last := r.writes(t, "/after", 300)
	st := waitStored(t, run.a, last)
	run.stop()
	if st.ChainStart < first || st.LastSnapshotRevision != st.ChainStart {
		t.Errorf("the chain starts at %d (snapshot %d), want the first snapshot, at or after %d", st.ChainStart, st.LastSnapshotRevision, first)
	}
	h, deltas := r.stored(t, nil)
	checkChain(t, h, deltas, r.truth(t, h.Snapshots[0].To+1, last), last)

	// The snapshot is etcd's file as it is: named by the revision its own
	// database holds, which is what the deltas continue from.
	snap := h.Snapshots[0]
	path := filepath.Join(r.root, snap.Key)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := readSnapshotDB(path, fi.Size()-trailerSize)
	if err != nil || info.Revision != snap.To {
		t.Errorf("the snapshot named %d holds revision %d (%v)", snap.To, info.Revision, err)
	}
	// The leases keys were put with are recorded with their granted TTLs.
	ttls := map[int64]int64{}
	for _, d := range deltas {
		for _, l := range d.Leases {
			ttls[l.TTL]++
		}
	}
	if ttls[600] == 0 || ttls[60] == 0 {
		t.Errorf("lease TTLs recorded: %v, want both 600 and 60", ttls)
	}
}

func TestArchiverResumesWithoutGapOrOverlap(t *testing.T) {
	r := newArchiveRig(t)
	run := r.start(t, nil)
	waitStored(t, run.a, r.writes(t, "/one", 50))
	run.stop()
	r.writes(t, "/while-stopped", 50)
	run = r.start(t, nil)
	last := r.writes(t, "/two", 50)
	waitStored(t, run.a, last)
	run.stop()

	h, deltas := r.stored(t, nil)
	if len(h.Snapshots) != 1 {
		t.Errorf("%d snapshots, want 1: a restarted archiver resumes the chain", len(h.Snapshots))
	}
	next := h.Snapshots[0].To + 1
	for _, o := range h.Deltas {
		if o.From != next {
			t.Errorf("delta %d-%d follows revision %d: one archiver at a time leaves no gap and no overlap", o.From, o.To, next-1)
		}
		next = o.To + 1
	}
	checkChain(t, h, deltas, r.truth(t, h.Snapshots[0].To+1, last), last)
}

// Two archivers on one store: their deltas may overlap, and every overlap
// holds the same events; the chain has no gap.
func TestTwoArchiversAtOnce(t *testing.T) {
	r := newArchiveRig(t)
	one := r.start(t, nil)
	waitStored(t, one.a, r.writes(t, "/a", 20))
	two := r.start(t, func(o *ArchiveOptions) { o.DeltaInterval = 3 * time.Second })
	last := r.writes(t, "/b", 400)
	waitStored(t, one.a, last)
	waitStored(t, two.a, last)
	one.stop()
	two.stop()
	h, deltas := r.stored(t, nil)
	truth := r.truth(t, h.Snapshots[0].To+1, last)
	for rev := h.Snapshots[0].To; rev <= last; rev++ {
		if _, err := archive.Select(h, archive.Target{Revision: rev}); err != nil {
			t.Fatalf("revision %d: %v", rev, err)
		}
	}
	overlaps := 0
	for i, a := range h.Deltas {
		for _, b := range h.Deltas[i+1:] {
			if a.From <= b.To && b.From <= a.To {
				overlaps++
			}
		}
	}
	t.Logf("%d deltas, %d overlapping pairs", len(h.Deltas), overlaps)
	checkChain(t, h, deltas, truth, last)
	// Every stored copy of a revision is etcd's.
	for key, d := range deltas {
		for _, rv := range d.Revisions {
			if !cmp.Equal(truth[rv.Revision], rv.Events, cmpopts.EquateEmpty()) {
				t.Errorf("%s: revision %d is not etcd's", key, rv.Revision)
			}
		}
	}
}

func TestArchiverNewChainAfterCompaction(t *testing.T) {
	r := newArchiveRig(t)
	run := r.start(t, nil)
	stored := r.writes(t, "/a", 20)
	waitStored(t, run.a, stored)
	run.stop()
	last := r.writes(t, "/b", 30)
	if _, err := r.cli.Compact(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	run = r.start(t, nil)
	deadline := time.Now().Add(30 * time.Second)
	var st report.ArchiveStatus
	for st = run.a.Status(); len(st.ChainBreaks) == 0; st = run.a.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("no new chain after compaction: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := r.writes(t, "/c", 10)
	waitStored(t, run.a, after)
	run.stop()
	br := st.ChainBreaks[0]
	if br.From != stored+1 || br.To < last || st.ChainStart != br.To {
		t.Errorf("chain break %+v, chain start %d: want revisions from %d missing up to the new snapshot at or after %d", br, st.ChainStart, stored+1, last)
	}
	h, _ := r.stored(t, nil)
	if _, err := archive.Select(h, archive.Target{Revision: stored + 1}); !errors.Is(err, archive.ErrGap) {
		t.Errorf("a revision the compaction took: %v, want ErrGap", err)
	}
	if p, err := archive.Select(h, archive.Target{}); err != nil || p.Revision < after || p.Snapshot.To != br.To {
		t.Errorf("the newest state: %+v, %v; want the new chain's snapshot and deltas to %d", p, err, after)
	}
}

func TestArchiverSealed(t *testing.T) {
	r := newArchiveRig(t)
	key := bytes.Repeat([]byte{7}, archive.KeySize)
	run := r.start(t, func(o *ArchiveOptions) { o.Key, o.CompressSnapshots = key, true })
	last := r.writes(t, "/secret", 60)
	waitStored(t, run.a, last)
	run.stop()
	h, deltas := r.stored(t, key)
	checkChain(t, h, deltas, r.truth(t, h.Snapshots[0].To+1, last), last)
	// Nothing stored reads without the key, and the wrong key is named.
	for _, o := range append(slices.Clone(h.Snapshots), h.Deltas...) {
		data, err := os.ReadFile(filepath.Join(r.root, o.Key))
		if err != nil {
			t.Fatal(err)
		}
		if !o.Sealed || !archive.IsSealed(data) || bytes.Contains(data, []byte("/secret/")) {
			t.Errorf("%s is stored in the clear", o.Key)
		}
		if _, err := archive.NewOpener(bytes.NewReader(data), bytes.Repeat([]byte{8}, archive.KeySize), o.Name); !errors.Is(err, archive.ErrWrongKey) {
			t.Errorf("%s opened with another key: %v, want ErrWrongKey", o.Key, err)
		}
	}
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	key := bytes.Repeat([]byte{0xab}, archive.KeySize)
	cases := []struct {
		name, reason string
		data         []byte
		ok           bool
	}{
		{"raw", "the Secret's bytes as they are", key, true},
		{"base64", "kubectl create secret --from-literal with base64 text", []byte(base64.StdEncoding.EncodeToString(key) + "\n"), true},
		{"hex", "openssl rand -hex 32", []byte(hex.EncodeToString(key)), true},
		{"short", "16 bytes is AES-128's", key[:16], false},
		{"passphrase", "a password is not a key", []byte("correct horse battery staple"), false},
	}
	for _, tc := range cases {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := LoadKey(path)
		switch {
		case tc.ok && (err != nil || !bytes.Equal(got, key)):
			t.Errorf("%s (%s): %x, %v", tc.name, tc.reason, got, err)
		case !tc.ok && (err == nil || strings.Contains(err.Error(), string(tc.data))):
			t.Errorf("%s (%s): %v; want an error that does not show the key", tc.name, tc.reason, err)
		}
	}
}
