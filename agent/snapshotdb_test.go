package agent

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// revKey is a "key" bucket key in etcd's layout.
func revKey(main, sub int64, tombstone bool) []byte {
	k := make([]byte, revisionKeyLen, revisionKeyLen+1)
	binary.BigEndian.PutUint64(k, uint64(main))
	k[8] = '_'
	binary.BigEndian.PutUint64(k[9:], uint64(sub))
	if tombstone {
		k = append(k, 't')
	}
	return k
}

// TestReadSnapshotDB: what is read from a database built in etcd's layout
// with bbolt itself; real snapshots are covered by TestFetch.
func TestReadSnapshotDB(t *testing.T) {
	tests := []struct {
		name    string
		reason  string
		buckets map[string]map[string][]byte
		shrink  int64
		want    snapshotDB
		wantErr bool
	}{{
		name:   "3.6",
		reason: "the highest main revision, a tombstone's included, and the storage version's major.minor",
		buckets: map[string]map[string][]byte{
			"key":  {string(revKey(2, 0, false)): nil, string(revKey(300, 1, true)): nil, string(revKey(299, 0, false)): nil},
			"meta": {"storageVersion": []byte("3.6.0"), "consistent_index": {0, 0, 0, 0, 0, 0, 0, 9}},
		},
		want: snapshotDB{Revision: 300, StorageVersion: "3.6"},
	}, {
		name:   "newest revision compacted away",
		reason: "a compaction at the newest revision, a delete, removed its tombstone: the revision is the compaction's, as etcd restores it",
		buckets: map[string]map[string][]byte{
			"key":  {string(revKey(40, 0, false)): nil},
			"meta": {"finishedCompactRev": revKey(42, 0, false), "scheduledCompactRev": revKey(42, 0, false)},
		},
		want: snapshotDB{Revision: 42},
	}, {
		name:   "compaction scheduled, not finished",
		reason: "etcd takes the scheduled compaction's revision too (etcd-io/etcd#17780)",
		buckets: map[string]map[string][]byte{
			"key":  {string(revKey(40, 0, false)): nil},
			"meta": {"finishedCompactRev": revKey(30, 0, false), "scheduledCompactRev": revKey(45, 0, false)},
		},
		want: snapshotDB{Revision: 45},
	}, {
		name:    "compaction revision not a revision",
		reason:  "a meta value etcd never writes",
		buckets: map[string]map[string][]byte{"key": {}, "meta": {"finishedCompactRev": {1, 2}}},
		wantErr: true,
	}, {
		name:    "3.5",
		reason:  "etcd 3.5 writes no storage version",
		buckets: map[string]map[string][]byte{"key": {string(revKey(7, 0, false)): nil}, "meta": {}},
		want:    snapshotDB{Revision: 7},
	}, {
		name:    "no keys",
		reason:  "a cluster never written to has an empty key bucket, and etcd starts its store at revision 1",
		buckets: map[string]map[string][]byte{"key": {}},
		want:    snapshotDB{Revision: 1},
	}, {
		name:    "no key bucket",
		reason:  "a bbolt database that is not etcd's",
		buckets: map[string]map[string][]byte{"widgets": {"a": []byte("b")}},
		wantErr: true,
	}, {
		name:    "not a revision",
		reason:  "a key bucket whose keys are not revisions",
		buckets: map[string]map[string][]byte{"key": {"hello": nil}},
		wantErr: true,
	}, {
		name:    "bad storage version",
		reason:  "a storage version that is not a version",
		buckets: map[string]map[string][]byte{"key": {}, "meta": {"storageVersion": []byte("six")}},
		wantErr: true,
	}, {
		name:    "pages past the database",
		reason:  "a database reaching into etcd's trailer was cut short",
		buckets: map[string]map[string][]byte{"key": {}},
		shrink:  1,
		wantErr: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "db")
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error {
				for name, kv := range tt.buckets {
					b, err := tx.CreateBucket([]byte(name))
					if err != nil {
						return err
					}
					for k, v := range kv {
						if err := b.Put([]byte(k), v); err != nil {
							return err
						}
					}
				}
				return nil
			})
			// What a snapshot holds: the pages up to the high water mark,
			// as tx.WriteTo writes them (the file itself may be larger).
			var size int64
			err = errors.Join(err, db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }), db.Close())
			if err != nil {
				t.Fatal(err)
			}
			got, err := readSnapshotDB(path, size-tt.shrink)
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, ErrNotEtcdSnapshot)) {
				t.Fatalf("%s: error %v, want an ErrNotEtcdSnapshot: %v", tt.reason, err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); err == nil && d != "" {
				t.Errorf("%s (-want +got):\n%s", tt.reason, d)
			}
		})
	}
}

func TestMinorOf(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "3.6.16", want: "3.6"},
		{in: "v3.5.0", want: "3.5"},
		{in: "3.6", want: "3.6"},
		{in: "3.10.1-rc.0", want: "3.10"},
		{in: "3", wantErr: true},
		{in: "three.six", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := minorOf(tt.in)
		if tt.wantErr != (err != nil) || (err == nil && got.String() != tt.want) {
			t.Errorf("minorOf(%q) = %v, %v; want %q (error: %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	if !(minor{3, 10}).newerThan(minor{3, 9}) || (minor{3, 5}).newerThan(minor{3, 6}) || !(minor{4, 0}).newerThan(minor{3, 9}) {
		t.Error("newerThan compares major, then minor, as numbers")
	}
}
