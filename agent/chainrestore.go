package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"

	"github.com/etcdhook/etcd-hook/agent/archive"
)

// ObjectReader is a store a restore reads: S3Store or FileStore.
type ObjectReader interface {
	List(ctx context.Context, prefix string) ([]StoredObject, error)
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	Location(key string) string
}

// ChainSource is a continuous backup to restore from, and to what.
type ChainSource struct {
	Store ObjectReader
	// Base is the backup's key; History the cluster whose chain to read,
	// "" for the newest the store holds.
	Base, History string
	Target        archive.Target
	// Key opens sealed objects.
	Key []byte
}

// ChainResult is what a chain restore rebuilt, and how it was checked.
type ChainResult struct {
	History  string
	Snapshot string
	Deltas   int
	// Revision is the revision the rebuilt state is at.
	Revision int64
	// Hashes counts the cluster's HashKV checkpoints the replay matched on
	// the way; Skipped those recorded under an older compaction than the
	// snapshot's, which cannot be reproduced.
	Hashes, Skipped int
}

// RestoreChain rebuilds the state at src.Target into out, as a snapshot
// file (the database and etcd's sha256 trailer) that etcdutl restores: the
// newest snapshot at or below the target, then every revision after it up
// to the target, replayed and checked (replay.go). Whatever refuses the
// restore (a target out of the chain, a gap, a wrong key, a damaged
// object, a replay that differs) is unusable, and out is never written
// then. work holds the scratch files.
func RestoreChain(ctx context.Context, src ChainSource, work, out string) (res ChainResult, err error) {
	objs, err := src.Store.List(ctx, src.Base+archive.Dir)
	if err != nil {
		return res, fmt.Errorf("listing %s: %w", src.Store.Location(src.Base+archive.Dir), err)
	}
	listing := make([]archive.Listed, 0, len(objs))
	for _, o := range objs {
		listing = append(listing, archive.Listed{Key: o.Key, Size: o.Size, Modified: o.LastModified})
	}
	hs := archive.Histories(src.Base, listing)
	var h *archive.History
	if src.History == "" {
		if h, err = archive.PickHistory(hs, src.Target); err != nil {
			return res, unusable(err)
		}
	}
	for i := range hs {
		if hs[i].ID == src.History {
			h = &hs[i]
		}
	}
	if h == nil {
		return res, unusable(fmt.Errorf("%w under %s", archive.ErrEmpty, src.Store.Location(src.Base+archive.Dir+src.History)))
	}
	p, err := archive.Select(*h, src.Target)
	if err != nil {
		return res, unusable(err)
	}
	res.History, res.Snapshot = h.ID, src.Store.Location(p.Snapshot.Key)

	db := filepath.Join(work, "replay.db")
	if err := src.fetchSnapshot(ctx, p.Snapshot, db); err != nil {
		return res, err
	}
	r := openReplay(db)
	defer func() {
		if cerr := r.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if r.rev() != p.Snapshot.To {
		return res, unusable(fmt.Errorf("%w: the snapshot %s is named for revision %d and holds %d", ErrReplay, p.Snapshot.Key, p.Snapshot.To, r.rev()))
	}
	// A time target stops at the first revision seen after it: the deltas'
	// names bound the revision, their revisions' receipt times place it.
	timed := !src.Target.Time.IsZero()
	for _, o := range p.Deltas {
		d, err := src.fetchDelta(ctx, o)
		if err != nil {
			return res, err
		}
		ttls := map[int64]int64{}
		for _, l := range d.Leases {
			ttls[l.ID] = l.TTL
		}
		done := false
		for _, rv := range d.Revisions {
			if rv.Revision > p.Revision || timed && rv.Received.After(src.Target.Time) {
				done = true
				break
			}
			if err := r.apply(rv, ttls); err != nil {
				return res, unusable(fmt.Errorf("%s: %w", o.Key, err))
			}
		}
		if h := d.Hash; h != nil && h.Revision == r.rev() {
			if err := r.checkHash(*h); err != nil {
				return res, unusable(fmt.Errorf("%s: %w", o.Key, err))
			}
		}
		res.Deltas++
		if done {
			break
		}
	}
	res.Revision, res.Hashes, res.Skipped = r.rev(), r.hashes, r.skipped
	if err := r.close(); err != nil {
		return res, err
	}
	return res, writeSnapshotFile(db, out)
}

// fetchSnapshot writes the snapshot's database to db, opened and
// checked against etcd's trailer, which it leaves off.
func (src ChainSource) fetchSnapshot(ctx context.Context, o archive.Object, db string) error {
	body, err := src.open(ctx, o)
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.Create(db)
	if err != nil {
		return err
	}
	defer f.Close()
	v := newVerifyingReader(body)
	if _, err := io.Copy(f, v); err != nil {
		return describeRead(o, err)
	}
	if err := f.Truncate(v.Size() - trailerSize); err != nil {
		return err
	}
	return f.Close()
}

// fetchDelta reads and decodes a delta whole: nothing of it is replayed
// unless all of it is as the archiver wrote it.
func (src ChainSource) fetchDelta(ctx context.Context, o archive.Object) (*archive.Delta, error) {
	body, err := src.open(ctx, o)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	d, err := archive.DecodeDelta(body)
	if err != nil {
		return nil, describeRead(o, err)
	}
	if d.History != o.History || d.From != o.From || d.To != o.To {
		return nil, unusable(fmt.Errorf("%s holds revisions %d to %d of %s: not what its name says", o.Key, d.From, d.To, d.History))
	}
	return d, nil
}

// open reads an object as it was before it was stored: opened with the key
// if sealed, and decompressed if a compressed snapshot (a delta decodes its
// own compression).
func (src ChainSource) open(ctx context.Context, o archive.Object) (io.ReadCloser, error) {
	body, err := src.Store.Open(ctx, o.Key)
	if err != nil {
		return nil, err
	}
	var r io.Reader = body
	if o.Sealed {
		if src.Key == nil {
			body.Close()
			return nil, unusable(fmt.Errorf("%s is encrypted, and no key was given: set spec.encryption", o.Key))
		}
		if r, err = archive.NewOpener(body, src.Key, o.Name); err != nil {
			body.Close()
			return nil, describeRead(o, err)
		}
	}
	if o.Compressed && o.Kind == archive.KindSnapshot {
		z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			body.Close()
			return nil, describeRead(o, err)
		}
		return readCloser{z.IOReadCloser(), body}, nil
	}
	return readCloser{io.NopCloser(r), body}, nil
}

type readCloser struct {
	io.ReadCloser
	body io.Closer
}

func (r readCloser) Close() error { r.ReadCloser.Close(); return r.body.Close() }

// describeRead names the object in a failure to read it, and makes the
// failures that are the object's own (a wrong key, damage) unusable.
func describeRead(o archive.Object, err error) error {
	err = fmt.Errorf("%s: %w", o.Key, err)
	if errors.Is(err, archive.ErrWrongKey) || errors.Is(err, archive.ErrTampered) || errors.Is(err, archive.ErrNotSealed) ||
		errors.Is(err, archive.ErrBadDelta) || errors.Is(err, ErrSnapshotIntegrity) || errors.Is(err, zstd.ErrMagicMismatch) ||
		errors.Is(err, zstd.ErrCRCMismatch) {
		return unusable(err)
	}
	return err
}

// writeSnapshotFile writes db to out with etcd's sha256 trailer, as a snapshot
// etcdutl checks, through a temporary file renamed into place.
func writeSnapshotFile(db, out string) error {
	in, err := os.Open(db)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := out + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), in); err != nil {
		return err
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
