package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// ArchiveOptions is one continuous backup ("etcd-hook archive"): a
// long-running Pod that stores every change of a cluster within
// DeltaInterval, and full snapshots to replay them on.
type ArchiveOptions struct {
	Endpoints []string
	TLS       *tls.Config
	// Base is the backup's key: objects go under Base + archive.Dir.
	Base string
	// DeltaInterval bounds how long a change the watch delivered waits
	// before it is stored.
	DeltaInterval time.Duration
	// SnapshotInterval is the time between full snapshots; 0 takes one
	// only to begin a chain.
	SnapshotInterval time.Duration
	// MaxSnapshots keeps that many full snapshots, each with the deltas
	// after it; 0 keeps everything.
	MaxSnapshots int
	// Key seals every object (archive's seal.go); nil stores them as they
	// are.
	Key []byte
	// CompressSnapshots stores snapshots with zstd; deltas always are.
	CompressSnapshots bool
	// SpoolDir holds a snapshot between etcd and the store: its revision
	// is read from the file before it is named.
	SpoolDir string
	// HashInterval is how often the live cluster's HashKV is recorded in a
	// delta for restores to compare with; 0 means a minute. It reads the
	// whole keyspace on a member, so not on every delta.
	HashInterval time.Duration
	Logger       *slog.Logger
	Now          func() time.Time
}

// Archiver runs one ArchiveOptions. Status may be called while Run runs.
type Archiver struct {
	opts  ArchiveOptions
	store Store
	log   *slog.Logger
	now   func() time.Time

	mu     sync.Mutex
	status report.ArchiveStatus

	// leases remembers granted TTLs by lease ID; see leaseTTLs.
	leases   map[int64]int64
	lastHash time.Time
}

// NewArchiver checks the options.
func NewArchiver(opts ArchiveOptions, store Store) (*Archiver, error) {
	switch {
	case len(opts.Endpoints) == 0:
		return nil, errors.New("no etcd endpoint to archive")
	case opts.Base == "":
		return nil, errors.New("no key to archive under")
	case opts.DeltaInterval < time.Second || opts.DeltaInterval > time.Minute:
		return nil, fmt.Errorf("the delta interval is %s; it must be 1s to 60s", opts.DeltaInterval)
	case opts.Key != nil && len(opts.Key) != archive.KeySize:
		return nil, fmt.Errorf("the encryption key is %d bytes; it must be %d", len(opts.Key), archive.KeySize)
	case opts.SpoolDir == "":
		return nil, errors.New("no spool directory for snapshots")
	}
	if err := needsTLS(opts.Endpoints, opts.TLS); err != nil {
		return nil, err
	}
	if opts.HashInterval <= 0 {
		opts.HashInterval = time.Minute
	}
	a := &Archiver{opts: opts, store: store, log: opts.Logger, now: opts.Now, leases: map[int64]int64{}}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a, nil
}

// Status is the archiver's state for the hook.
func (a *Archiver) Status() report.ArchiveStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.status
	st.ChainBreaks = append([]report.ChainBreak(nil), st.ChainBreaks...)
	st.Now = a.now().UTC()
	return st
}

func (a *Archiver) update(f func(*report.ArchiveStatus)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(&a.status)
}

// failed records err as the status's last error, and logs it.
func (a *Archiver) failed(msg string, err error) {
	a.log.Error(msg, "error", err)
	a.update(func(s *report.ArchiveStatus) { s.LastError = msg + ": " + err.Error() })
}

// Run archives until ctx ends. Every failure (etcd or the store out of
// reach, a watch cut) is retried from what the store holds, with a
// backoff up to 30 s; changes the watch delivered stay buffered meanwhile.
func (a *Archiver) Run(ctx context.Context) error {
	cli, err := newClientFor(a.opts.Endpoints, a.opts.TLS)
	if err != nil {
		return err
	}
	defer cli.Close()
	backoff := time.Second
	for ctx.Err() == nil {
		start := a.now()
		err := a.follow(ctx, cli)
		if ctx.Err() != nil {
			break
		}
		if err == errNewChain {
			// Not a failure: the snapshot that begins the next chain is
			// stored, and the chain break is in the status.
			backoff = time.Second
			continue
		}
		a.failed("archiving stopped; resuming from the store", err)
		if a.now().Sub(start) > time.Minute {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	return nil
}

// follow finds where the store's chain of this cluster ends, begins one
// with a snapshot if there is none, and follows the cluster's changes from
// there until the watch fails.
func (a *Archiver) follow(ctx context.Context, cli *clientv3.Client) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	head, err := cli.Get(rctx, "\x00", clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return fmt.Errorf("reading the cluster's revision through its quorum: %w", err)
	}
	history := archive.HistoryID(head.Header.ClusterId)
	hs, err := a.histories(ctx)
	if err != nil {
		return err
	}
	var h archive.History
	for _, c := range hs {
		if c.ID == history {
			h = c
		}
	}
	a.update(func(s *report.ArchiveStatus) {
		if s.History != history {
			*s = report.ArchiveStatus{History: history}
		}
	})
	resume := h.LastRevision()
	if len(h.Snapshots) == 0 {
		snap, err := a.snapshot(ctx, history)
		if err != nil {
			return err
		}
		resume = snap.To
		a.update(func(s *report.ArchiveStatus) { s.ChainStart = snap.To })
	} else {
		newest := h.Snapshots[len(h.Snapshots)-1]
		a.update(func(s *report.ArchiveStatus) {
			s.ChainStart = newest.To
			s.LastSnapshotRevision = newest.To
			s.LastSnapshotTime = timePtr(newest.Last)
			if last := lastDelta(h); last != nil {
				s.LastDeltaRevision, s.LastDeltaTime = last.To, timePtr(last.Modified)
			}
		})
	}
	a.log.Info("archiving", "history", history, "from", resume+1, "cluster revision", head.Header.Revision)
	return a.watch(ctx, cli, history, resume)
}

// histories lists every continuous backup of the base in the store.
func (a *Archiver) histories(ctx context.Context) ([]archive.History, error) {
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	objs, err := a.store.List(lctx, a.opts.Base+archive.Dir)
	if err != nil {
		return nil, fmt.Errorf("listing the store: %w", err)
	}
	listing := make([]archive.Listed, 0, len(objs))
	for _, o := range objs {
		listing = append(listing, archive.Listed{Key: o.Key, Size: o.Size, Modified: o.LastModified})
	}
	return archive.Histories(a.opts.Base, listing), nil
}

func lastDelta(h archive.History) *archive.Object {
	var last *archive.Object
	for i := range h.Deltas {
		if last == nil || h.Deltas[i].To > last.To {
			last = &h.Deltas[i]
		}
	}
	return last
}

func timePtr(t time.Time) *time.Time { t = t.UTC(); return &t }

// LoadKey reads an encryption key from the file a Secret's key is mounted
// as: its 32 bytes as they are, or written as base64 or hex (what
// "kubectl create secret --from-literal" gets from a shell). The error
// says how long it was, never what it holds.
func LoadKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the encryption key: %w", err)
	}
	key, err := v1beta2.ParseEncryptionKey(data)
	if err != nil {
		return nil, fmt.Errorf("the encryption key in %s: %w", path, err)
	}
	return key, nil
}
