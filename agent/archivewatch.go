package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/agent/report"
)

const (
	// maxDeltaEvents cuts a delta early, whatever the interval: bytes of
	// keys and values, before compression.
	maxDeltaEvents = 4 << 20
	// maxBuffered stops reading the watch while the store refuses writes:
	// etcd then holds the changes (or compacts them away, and a new chain
	// begins), rather than the archiver's memory.
	maxBuffered = 32 << 20
	// probeEvery is how often the cluster's revision is read, to know of
	// changes the watch has not delivered yet.
	probeEvery = time.Second
)

// pending is what the watch delivered and no delta holds yet.
type pending struct {
	revisions []archive.Revision
	bytes     int
}

func (p *pending) add(rev int64, at time.Time, ev *mvccpb.Event) {
	e := archive.Event{Key: ev.Kv.Key}
	switch ev.Type {
	case mvccpb.Event_PUT:
		e.Type, e.Value, e.CreateRevision, e.Version, e.Lease = archive.Put, ev.Kv.Value, ev.Kv.CreateRevision, ev.Kv.Version, ev.Kv.Lease
	default:
		e.Type = archive.Delete
	}
	if n := len(p.revisions); n > 0 && p.revisions[n-1].Revision == rev {
		p.revisions[n-1].Events = append(p.revisions[n-1].Events, e)
	} else {
		p.revisions = append(p.revisions, archive.Revision{Revision: rev, Received: at, Events: []archive.Event{e}})
	}
	p.bytes += len(e.Key) + len(e.Value) + 32
}

// errNewChain ends a watch that fell behind compaction: follow begins again
// from the snapshot that starts the next chain.
var errNewChain = errors.New("the watch fell behind compaction; a new chain begins")

// watch stores every change after revision from-1 of history as deltas.
func (a *Archiver) watch(ctx context.Context, cli *clientv3.Client, history string, after int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	events := cli.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(after+1), clientv3.WithProgressNotify())
	var buf pending
	received := after
	// The probe saw revision probed at behindSince, before the watch
	// delivered it: the changes up to it are known to exist since then.
	var behindSince time.Time
	var probed int64
	// known is when the oldest buffered change was first known of.
	var known time.Time
	flush := time.NewTimer(time.Hour)
	flush.Stop()
	probe := time.NewTicker(probeEvery)
	defer probe.Stop()
	var snapshots <-chan time.Time
	if a.opts.SnapshotInterval > 0 {
		t := time.NewTicker(a.opts.SnapshotInterval)
		defer t.Stop()
		snapshots = t.C
	}
	snapDone := make(chan error, 1)
	snapRunning := false

	publish := func() {
		var oldest *time.Time
		if len(buf.revisions) > 0 {
			oldest = timePtr(known)
		}
		if !behindSince.IsZero() && (oldest == nil || behindSince.Before(*oldest)) {
			oldest = timePtr(behindSince)
		}
		a.update(func(s *report.ArchiveStatus) { s.ReceivedRevision, s.OldestUnstored = received, oldest })
	}
	store := func() {
		if len(buf.revisions) == 0 {
			return
		}
		if err := a.storeDelta(ctx, cli, history, buf.revisions); err != nil {
			a.failed("storing a delta", err)
			flush.Reset(time.Second)
			return
		}
		buf = pending{}
		publish()
	}
	defer func() {
		// What was received is stored before the archiver stops, if the
		// store takes it within a few seconds.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if len(buf.revisions) > 0 {
			if err := a.storeDelta(sctx, cli, history, buf.revisions); err != nil {
				a.log.Error("changes received were not stored before stopping", "from", buf.revisions[0].Revision, "error", err)
			}
		}
	}()

	for {
		watchCh := events
		if buf.bytes >= maxBuffered {
			watchCh = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case resp, ok := <-watchCh:
			if !ok {
				return errors.New("the watch closed")
			}
			if err := resp.Err(); err != nil || resp.CompactRevision != 0 {
				store()
				if resp.CompactRevision != 0 || errors.Is(err, rpctypes.ErrCompacted) {
					return a.newChain(ctx, history, received)
				}
				return fmt.Errorf("the watch failed: %w", err)
			}
			if got := archive.HistoryID(resp.Header.ClusterId); got != history {
				store()
				return fmt.Errorf("the endpoints now serve cluster %s, not %s", got, history)
			}
			at := a.now().UTC()
			if len(buf.revisions) == 0 && len(resp.Events) > 0 {
				known = at
				if !behindSince.IsZero() && resp.Events[0].Kv.ModRevision <= probed {
					known = behindSince
				}
				// Stored within half the interval of being known, which
				// leaves the other half for the store.
				flush.Reset(max(0, known.Add(a.opts.DeltaInterval/2).Sub(at)))
			}
			for _, ev := range resp.Events {
				buf.add(ev.Kv.ModRevision, at, ev)
				received = max(received, ev.Kv.ModRevision)
				// A lease's TTL is asked for as soon as a key is seen on it:
				// a lease revoked before it is asked for has none to give.
				if ev.Type == mvccpb.Event_PUT && ev.Kv.Lease != 0 {
					a.leaseTTL(ctx, cli, ev.Kv.Lease)
				}
			}
			// A progress notification says every revision up to its header's
			// was delivered.
			if resp.IsProgressNotify() {
				received = max(received, resp.Header.Revision)
			}
			if received >= probed {
				behindSince = time.Time{}
			}
			publish()
			if buf.bytes >= maxDeltaEvents {
				store()
			}
		case <-flush.C:
			store()
		case <-probe.C:
			pctx, cancel := context.WithTimeout(ctx, probeEvery)
			head, err := cli.Get(pctx, "\x00", clientv3.WithCountOnly())
			cancel()
			switch {
			case err != nil:
				a.failed("reading the cluster's revision", err)
			case head.Header.Revision > received && behindSince.IsZero():
				behindSince, probed = a.now().UTC(), head.Header.Revision
			}
			publish()
		case <-snapshots:
			if !snapRunning {
				snapRunning = true
				go func() {
					_, err := a.snapshot(ctx, history)
					snapDone <- err
				}()
			}
		case err := <-snapDone:
			snapRunning = false
			if err != nil {
				a.failed("taking a periodic snapshot", err)
			}
		}
	}
}

// newChain takes the snapshot that begins a chain after the watch fell
// behind compaction at received, and records the revisions no delta holds.
func (a *Archiver) newChain(ctx context.Context, history string, received int64) error {
	snap, err := a.snapshot(ctx, history)
	if err != nil {
		return fmt.Errorf("%w, but its snapshot failed: %w", errNewChain, err)
	}
	a.log.Warn("the watch fell behind compaction: a new chain begins", "missing from", received+1, "to", snap.To)
	a.update(func(s *report.ArchiveStatus) {
		s.ChainStart = snap.To
		s.ChainBreaks = append(s.ChainBreaks, report.ChainBreak{At: a.now().UTC(), From: received + 1, To: snap.To})
		if n := len(s.ChainBreaks); n > 5 {
			s.ChainBreaks = s.ChainBreaks[n-5:]
		}
	})
	return errNewChain
}

// storeDelta stores revs as one delta, with the leases its keys are
// attached to and, at most every HashInterval, the cluster's HashKV at its
// last revision.
func (a *Archiver) storeDelta(ctx context.Context, cli *clientv3.Client, history string, revs []archive.Revision) error {
	d := &archive.Delta{History: history, From: revs[0].Revision, To: revs[len(revs)-1].Revision, Revisions: revs}
	d.Leases = a.leaseTTLs(ctx, cli, revs)
	if a.now().Sub(a.lastHash) >= a.opts.HashInterval {
		if h, err := a.hashKV(ctx, cli, d.To); err != nil {
			a.log.Warn("the cluster's HashKV could not be recorded", "revision", d.To, "error", err)
		} else {
			d.Hash, a.lastHash = h, a.now()
		}
	}
	var body bytes.Buffer
	if err := archive.EncodeDelta(&body, d); err != nil {
		return err
	}
	enc := archive.Encoding{Compressed: true, Sealed: a.opts.Key != nil}
	name := archive.DeltaName(d.From, d.To, revs[0].Received, revs[len(revs)-1].Received, enc)
	r, err := a.sealed(bytes.NewReader(body.Bytes()), name)
	if err != nil {
		return err
	}
	defer r.Close()
	key := archive.HistoryDir(a.opts.Base, history) + name
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	meta := map[string]string{MetaClusterID: history, MetaRevision: strconv.FormatInt(d.To, 10)}
	if err := a.store.Put(pctx, key, r, meta); err != nil {
		return err
	}
	stored := a.now().UTC()
	a.update(func(s *report.ArchiveStatus) {
		s.LastDeltaRevision, s.LastDeltaTime, s.LastError = d.To, &stored, ""
	})
	return nil
}

// sealed is r as stored: sealed under name when there is a key. Close
// it once done, so that the sealing goroutine ends even if the store
// stopped reading.
func (a *Archiver) sealed(r io.Reader, name string) (io.ReadCloser, error) {
	if a.opts.Key == nil {
		return io.NopCloser(r), nil
	}
	pr, pw := io.Pipe()
	go func() {
		// The sealer writes its header at once: made here, where the pipe's
		// reader is already the store's.
		w, err := archive.NewSealer(pw, a.opts.Key, name)
		if err == nil {
			if _, err = io.Copy(w, r); err == nil {
				err = w.Close()
			}
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// leaseTTLs are the granted TTLs of the leases revs attach keys to. The
// watch does not carry them, so each lease is asked for once, when a key
// on it is first seen (leaseTTL). A lease already gone by then has TTL 0:
// its keys' deletions follow in the watch, and a restore to a revision
// before them grants it a fallback TTL (see replay.go).
func (a *Archiver) leaseTTLs(ctx context.Context, cli *clientv3.Client, revs []archive.Revision) []archive.Lease {
	var out []archive.Lease
	seen := map[int64]bool{}
	for _, r := range revs {
		for _, e := range r.Events {
			if e.Lease == 0 || seen[e.Lease] {
				continue
			}
			seen[e.Lease] = true
			out = append(out, archive.Lease{ID: e.Lease, TTL: a.leaseTTL(ctx, cli, e.Lease)})
		}
	}
	return out
}

// leaseTTL is the lease's granted TTL, asked for once; 0 when it is gone.
func (a *Archiver) leaseTTL(ctx context.Context, cli *clientv3.Client, id int64) int64 {
	if ttl, ok := a.leases[id]; ok {
		return ttl
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := cli.TimeToLive(lctx, clientv3.LeaseID(id))
	cancel()
	if err != nil {
		// Asked again with the next key on it, or when its delta is stored.
		return 0
	}
	var ttl int64
	if resp.TTL > 0 {
		ttl = resp.GrantedTTL
	}
	if len(a.leases) >= 1<<16 {
		clear(a.leases)
	}
	a.leases[id] = ttl
	return ttl
}

// hashKV is the cluster's HashKV at rev, from the first member that
// answers.
func (a *Archiver) hashKV(ctx context.Context, cli *clientv3.Client, rev int64) (*archive.KVHash, error) {
	var errs []error
	for _, ep := range cli.Endpoints() {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cli.HashKV(hctx, ep, rev)
		cancel()
		if err == nil {
			return &archive.KVHash{Revision: rev, CompactRevision: resp.CompactRevision, Hash: resp.Hash}, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}
