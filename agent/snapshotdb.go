package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrNotEtcdSnapshot means a file passed etcd's integrity check but is not
// a database etcd can restore: not bbolt, or bbolt without etcd's buckets.
var ErrNotEtcdSnapshot = errors.New("not an etcd snapshot")

// snapshotDB is what the restore agent reads from a snapshot's database
// before it is restored, with etcd's own storage library: a backup that
// etcdutl would refuse is refused here first, where the reason can still
// name the object.
type snapshotDB struct {
	// Revision is what etcd's store is at once restored (before
	// --bump-revision): the highest main revision in the "key" bucket, or
	// the last compaction's when that is higher.
	Revision int64
	// StorageVersion is "major.minor" from meta/storageVersion, which etcd
	// writes from 3.6 on; empty for a snapshot of 3.5 or older.
	StorageVersion string
}

// etcd's schema (server/storage/schema): bucket and key names, and the
// layout of a "key" bucket key: 8-byte big-endian main revision, '_',
// 8-byte sub revision, and a trailing 't' for a tombstone.
var (
	keyBucket          = []byte("key")
	metaBucket         = []byte("meta")
	storageVersionName = []byte("storageVersion")
	// The revisions of the last compaction finished and scheduled, in the
	// "key" bucket's key layout.
	finishedCompactName  = []byte("finishedCompactRev")
	scheduledCompactName = []byte("scheduledCompactRev")
)

const revisionKeyLen = 8 + 1 + 8

// readSnapshotDB opens the snapshot at path read-only. dbSize is the length
// of its database, the file without etcd's 32-byte trailer: bbolt reads only
// the pages its meta page counts, so the trailer past them is never
// interpreted, and a database whose pages would reach into (or past) it is
// refused as cut short.
func readSnapshotDB(path string, dbSize int64) (info snapshotDB, err error) {
	// A database that passed etcd's hash is what etcd wrote, but the hash
	// says nothing about a snapshot's pages pointing outside the file: bbolt
	// reads through mmap, where that is a fault rather than an error.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: bbolt failed reading it: %v", ErrNotEtcdSnapshot, r)
		}
	}()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return info, err
		}
		return info, fmt.Errorf("%w: bbolt cannot open it: %v", ErrNotEtcdSnapshot, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		if tx.Size() > dbSize {
			return fmt.Errorf("%w: its database spans %d bytes, but only %d precede etcd's trailer", ErrNotEtcdSnapshot, tx.Size(), dbSize)
		}
		keys := tx.Bucket(keyBucket)
		if keys == nil {
			return fmt.Errorf("%w: the bbolt database has no %q bucket", ErrNotEtcdSnapshot, keyBucket)
		}
		// Keys sort by their big-endian main revision: the last is the highest.
		if k, _ := keys.Cursor().Last(); k != nil {
			if len(k) < revisionKeyLen || k[8] != '_' {
				return fmt.Errorf("%w: the %q bucket holds the key %x, which is not a revision", ErrNotEtcdSnapshot, keyBucket, k)
			}
			info.Revision = int64(binary.BigEndian.Uint64(k[:8]))
		}
		// A store never written to is at revision 1, as etcd starts it.
		info.Revision = max(info.Revision, 1)
		if meta := tx.Bucket(metaBucket); meta != nil {
			// A compaction removes the tombstones at or below its revision:
			// when the newest revision was a delete, no key holds it any
			// more, and etcd takes its revision from the compaction's
			// (mvcc's restore does the same), so as not to go backwards.
			for _, name := range [][]byte{finishedCompactName, scheduledCompactName} {
				if v := meta.Get(name); v != nil {
					if len(v) < 8 {
						return fmt.Errorf("%w: meta %q holds %x, which is not a revision", ErrNotEtcdSnapshot, name, v)
					}
					info.Revision = max(info.Revision, int64(binary.BigEndian.Uint64(v[:8])))
				}
			}
			if v := meta.Get(storageVersionName); v != nil {
				mm, err := minorOf(string(v))
				if err != nil {
					return fmt.Errorf("%w: its storage version: %v", ErrNotEtcdSnapshot, err)
				}
				info.StorageVersion = mm.String()
			}
		}
		return nil
	})
	return info, err
}

// minor is an etcd release line, "3.6": snapshots are compatible within
// one, and a member can restore those of its own line or older ones.
type minor struct{ major, minor int }

func (m minor) String() string { return fmt.Sprintf("%d.%d", m.major, m.minor) }
func (m minor) newerThan(o minor) bool {
	return m.major > o.major || (m.major == o.major && m.minor > o.minor)
}

// minorOf reads the release line of "3.6.16", "v3.5.0" or "3.6".
func minorOf(version string) (minor, error) {
	parts := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(version), "v"), ".", 3)
	if len(parts) < 2 {
		return minor{}, fmt.Errorf("%q is not an etcd version (major.minor.patch)", version)
	}
	maj, err1 := strconv.Atoi(parts[0])
	mnr, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || maj < 0 || mnr < 0 {
		return minor{}, fmt.Errorf("%q is not an etcd version (major.minor.patch)", version)
	}
	return minor{maj, mnr}, nil
}
