package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event is one change a watch delivered.
type Event struct {
	Revision int64
	Key      string
	Value    string // "" for a delete
	Delete   bool
}

// Watch follows every key under a prefix through one client, from a
// revision on. When the watch ends (the member lost its leader, or went
// away) it is opened again from the revision after the last event seen,
// as an application resuming a watch would.
type Watch struct {
	prefix string
	from   int64
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	events    []Event
	reopened  int
	compacted int64 // the compaction revision a resumption met, if any
}

// StartWatch watches prefix from revision from (the first revision to
// see). cli is the caller's: Watch does not close it.
func StartWatch(ctx context.Context, cli *clientv3.Client, prefix string, from int64) *Watch {
	ctx, cancel := context.WithCancel(ctx)
	w := &Watch{prefix: prefix, from: from, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx, cli)
	return w
}

func (w *Watch) run(ctx context.Context, cli *clientv3.Client) {
	defer close(w.done)
	next := w.from
	for ctx.Err() == nil {
		// RequireLeader: a member cut off from its peers ends the watch
		// rather than holding it silent; it is then opened elsewhere.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range cli.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(next)) {
			if resp.CompactRevision != 0 {
				w.mu.Lock()
				w.compacted = resp.CompactRevision
				w.mu.Unlock()
				cancel()
				return
			}
			if resp.Err() != nil {
				break
			}
			w.mu.Lock()
			for _, ev := range resp.Events {
				e := Event{Revision: ev.Kv.ModRevision, Key: string(ev.Kv.Key), Value: string(ev.Kv.Value), Delete: ev.Type == mvccpb.DELETE}
				w.events = append(w.events, e)
				next = e.Revision + 1
			}
			w.mu.Unlock()
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.reopened++
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Compacted is the compaction revision the watch met when it resumed
// below it, or 0: after a restore, a watch resumed from the old history
// must meet one.
func (w *Watch) Compacted() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.compacted
}

// WaitFor waits until the watch has delivered revision rev or later.
func (w *Watch) WaitFor(ctx context.Context, rev int64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		w.mu.Lock()
		last, compacted := w.last(), w.compacted
		w.mu.Unlock()
		if last >= rev || compacted != 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("history: the watch of %s delivered up to revision %d, not %d: %w", w.prefix, last, rev, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (w *Watch) last() int64 {
	if len(w.events) == 0 {
		return 0
	}
	return w.events[len(w.events)-1].Revision
}

// Stop ends the watch and returns what it saw and how many times it was
// opened again.
func (w *Watch) Stop() (events []Event, reopened int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Event(nil), w.events...), w.reopened
}

// CheckEvents checks a watch's events against the writes etcd
// acknowledged (Changes of a history): revisions strictly increasing (no
// duplicate, no reordering), nothing before from, and every acknowledged
// change at or after from there, at its revision, with its key and value.
func CheckEvents(events []Event, from int64, changes []Operation) error {
	var errs []error
	byRev := make(map[int64]Event, len(events))
	for i, e := range events {
		if e.Revision < from {
			errs = append(errs, fmt.Errorf("event %d at revision %d, before the watch's start %d", i, e.Revision, from))
		}
		if i > 0 && e.Revision <= events[i-1].Revision {
			errs = append(errs, fmt.Errorf("event %d at revision %d after one at %d: a duplicate or out of order", i, e.Revision, events[i-1].Revision))
		}
		byRev[e.Revision] = e
	}
	missing := 0
	for _, op := range changes {
		if op.Output.Revision < from {
			continue
		}
		e, ok := byRev[op.Output.Revision]
		want := Event{Revision: op.Output.Revision, Key: op.Input.Key, Value: op.Input.Value, Delete: op.Input.Kind == OpDelete}
		if want.Delete {
			want.Value = ""
		}
		switch {
		case !ok:
			missing++
			if missing <= 5 {
				errs = append(errs, fmt.Errorf("acknowledged %s at revision %d: no event (a gap)", describe(op.Input, op.Output), op.Output.Revision))
			}
		case e != want:
			errs = append(errs, fmt.Errorf("acknowledged %s at revision %d: the event there is %+v", describe(op.Input, op.Output), op.Output.Revision, e))
		}
	}
	if missing > 5 {
		errs = append(errs, fmt.Errorf("%d acknowledged changes in all have no event", missing))
	}
	return errors.Join(errs...)
}

// Replay reads the prefix's events from revision from up to through
// through a new watch: what the store holds, against which a long-running
// watch is compared event by event. compacted is non-zero when the store
// no longer holds them all.
func Replay(ctx context.Context, cli *clientv3.Client, prefix string, from, through int64) (events []Event, compacted int64, err error) {
	if through < from {
		return nil, 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for resp := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if resp.CompactRevision != 0 {
			return nil, resp.CompactRevision, nil
		}
		if err := resp.Err(); err != nil {
			return nil, 0, err
		}
		for _, ev := range resp.Events {
			e := Event{Revision: ev.Kv.ModRevision, Key: string(ev.Kv.Key), Value: string(ev.Kv.Value), Delete: ev.Type == mvccpb.DELETE}
			if e.Revision > through {
				return events, 0, nil
			}
			events = append(events, e)
			if e.Revision == through {
				return events, 0, nil
			}
		}
	}
	return nil, 0, fmt.Errorf("history: replaying %s from %d to %d: %w", prefix, from, through, ctx.Err())
}

// CheckReplay compares what a long-running watch saw with what the store
// replays over the same revisions: the same events, one for one. It
// catches a gap the acknowledged writes cannot show (a write applied
// whose client never heard back).
func CheckReplay(watched, replayed []Event) error {
	for i := range min(len(watched), len(replayed)) {
		if watched[i] != replayed[i] {
			return fmt.Errorf("history: event %d: the watch saw %+v, the store holds %+v", i, watched[i], replayed[i])
		}
	}
	if len(watched) != len(replayed) {
		return fmt.Errorf("history: the watch saw %d events, the store holds %d over the same revisions", len(watched), len(replayed))
	}
	return nil
}
