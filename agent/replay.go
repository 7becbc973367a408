package agent

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/coreos/go-semver/semver"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/etcdhook/etcd-hook/agent/archive"
)

// A point-in-time restore replays archived revisions onto a snapshot's
// database with etcd's own store (server/storage/mvcc), the code a member
// applies writes with, pinned to the release the module requires. Each
// archived revision is one write transaction, so revisions, create
// revisions and versions come out as etcd made them, and every change is
// compared with the archived one as it is made.
//
// Leases are etcd's too, with one difference: the lessor is never made
// primary, and only a primary lessor finds leases expired (the server then
// revokes them). A replay that takes longer than a lease's TTL therefore
// drops no key (gardener's #1045 revoked them mid-replay). Leases granted
// after the snapshot are granted with the TTL the archiver recorded; a
// restored cluster gives every lease its full TTL again from the moment it
// elects a leader, as any etcd snapshot restore does.

// ErrReplay is a chain that does not replay as etcd made it: an event
// missing, a change that comes out otherwise than archived, or a hash that
// differs. The restore is refused; nothing was touched but a scratch copy.
var ErrReplay = errors.New("the chain does not replay as etcd made it")

// unknownLeaseTTL is granted to a lease whose TTL the archiver could not
// learn (it was revoked before the archiver asked, so its keys' deletions
// follow in the chain): long enough that a restored key is not lost before
// its client can renew it.
const unknownLeaseTTL = 60

// replayer is a snapshot's database open for replay.
type replayer struct {
	be backend.Backend
	le lease.Lessor
	st mvcc.KV
	// Hashes counts the HashKV checkpoints compared, Skipped those that
	// could not be (recorded before the snapshot's compaction).
	hashes, skipped int
	closed          bool
}

// noCluster is the lessor's view of the cluster; only Checkpoint, which a
// replay never calls, asks it for a version.
type noCluster struct{}

func (noCluster) Version() *semver.Version { return nil }

// openReplay opens the database at path (no trailer) for replay.
func openReplay(path string) *replayer {
	lg := zap.NewNop()
	cfg := backend.DefaultBackendConfig(lg)
	cfg.Path = path
	// Commit every thousand writes or 100 ms: the pending batch is what
	// the replay holds in memory, beside the key index.
	cfg.BatchLimit, cfg.BatchInterval = 1000, 100*time.Millisecond
	be := backend.New(cfg)
	le := lease.NewLessor(lg, be, noCluster{}, lease.LessorConfig{})
	return &replayer{be: be, le: le, st: mvcc.NewStore(lg, be, le, mvcc.StoreConfig{})}
}

// rev is the store's revision: the snapshot's, then the last replayed.
func (r *replayer) rev() int64 { return r.st.Rev() }

// apply replays one revision. Revisions at or below the store's are
// skipped (an overlapping copy of a delta), which is why they are given
// in order.
func (r *replayer) apply(rv archive.Revision, ttls map[int64]int64) error {
	if rv.Revision <= r.rev() {
		return nil
	}
	if rv.Revision != r.rev()+1 {
		return fmt.Errorf("%w: revision %d follows %d: the revisions between are missing", ErrReplay, rv.Revision, r.rev())
	}
	// Leases are granted before the transaction: a grant takes the
	// backend's lock, which the open transaction holds, and a put on an
	// unknown lease panics.
	for _, e := range rv.Events {
		if e.Type != archive.Put || e.Lease == 0 || r.le.Lookup(lease.LeaseID(e.Lease)) != nil {
			continue
		}
		ttl := ttls[e.Lease]
		if ttl <= 0 {
			ttl = unknownLeaseTTL
		}
		if _, err := r.le.Grant(lease.LeaseID(e.Lease), ttl); err != nil {
			return fmt.Errorf("%w: granting lease %x at revision %d: %v", ErrReplay, e.Lease, rv.Revision, err)
		}
	}
	txn := r.st.Write(traceutil.TODO())
	err := func() error {
		for i, e := range rv.Events {
			if e.Type == archive.Put {
				txn.Put(e.Key, e.Value, lease.LeaseID(e.Lease))
				continue
			}
			if n, _ := txn.DeleteRange(e.Key, nil); n != 1 {
				return fmt.Errorf("%w: revision %d, event %d deletes %q, which is not there", ErrReplay, rv.Revision, i, e.Key)
			}
		}
		changes := txn.Changes()
		if len(changes) != len(rv.Events) {
			return fmt.Errorf("%w: revision %d made %d changes for %d events", ErrReplay, rv.Revision, len(changes), len(rv.Events))
		}
		for i, e := range rv.Events {
			c := changes[i]
			if !bytes.Equal(c.Key, e.Key) || e.Type == archive.Put && (c.CreateRevision != e.CreateRevision ||
				c.ModRevision != rv.Revision || c.Version != e.Version || c.Lease != e.Lease || !bytes.Equal(c.Value, e.Value)) {
				return fmt.Errorf("%w: revision %d, key %q came out at create revision %d, version %d, lease %x; etcd made it at %d, %d, %x",
					ErrReplay, rv.Revision, e.Key, c.CreateRevision, c.Version, c.Lease, e.CreateRevision, e.Version, e.Lease)
			}
		}
		return nil
	}()
	// There is no rollback: a failed replay's database is thrown away.
	txn.End()
	if err != nil {
		return err
	}
	if r.rev() != rv.Revision {
		return fmt.Errorf("%w: the store is at revision %d after replaying %d", ErrReplay, r.rev(), rv.Revision)
	}
	return nil
}

// checkHash compares the store with the live cluster's HashKV, at the
// store's revision, which must be h's. HashKV covers the revisions after
// the compaction the member had made: the store is compacted to the
// same first. A hash recorded under an older compaction than the
// snapshot's cannot be reproduced and is skipped.
func (r *replayer) checkHash(h archive.KVHash) error {
	if h.Revision != r.rev() {
		return fmt.Errorf("a hash at revision %d checked at %d", h.Revision, r.rev())
	}
	first := r.compacted()
	if h.CompactRevision < first {
		r.skipped++
		return nil
	}
	if h.CompactRevision > first {
		done, err := r.st.Compact(traceutil.TODO(), h.CompactRevision)
		if err != nil {
			return fmt.Errorf("%w: compacting to %d: %v", ErrReplay, h.CompactRevision, err)
		}
		<-done
	}
	got, _, err := r.st.HashStorage().HashByRev(h.Revision)
	if err != nil {
		return fmt.Errorf("%w: hashing revision %d: %v", ErrReplay, h.Revision, err)
	}
	if got.Hash != h.Hash {
		return fmt.Errorf("%w: at revision %d (compacted at %d) the replayed keys hash to %d, and the cluster's HashKV was %d",
			ErrReplay, h.Revision, h.CompactRevision, got.Hash, h.Hash)
	}
	r.hashes++
	return nil
}

// compacted is the store's compaction revision.
func (r *replayer) compacted() int64 {
	txn := r.st.Read(mvcc.ConcurrentReadTxMode, traceutil.TODO())
	defer txn.End()
	return txn.FirstRev()
}

// close writes everything down and closes the database.
func (r *replayer) close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.st.Close()
	r.le.Stop()
	r.be.ForceCommit()
	return r.be.Close()
}
