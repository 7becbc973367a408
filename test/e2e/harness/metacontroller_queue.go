package harness

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// The queue: one worker per parent, keyed by namespace/name as
// Metacontroller's work queue is, woken by watch events and paced by the
// retry backoff, resyncPeriodSeconds and resyncAfterSeconds; the workers
// share a pool of ControllerConfig.Workers syncs.

func (mc *Metacontroller) onEvent(ev Event) {
	if ev.Ref.Type == mc.cfg.ParentType {
		if ev.Type == Deleted {
			mc.forgetParent(ev.Ref)
			mc.mu.Lock()
			delete(mc.relatedBy, parentKey(ev.Ref))
			mc.mu.Unlock()
			return
		}
		mc.observeParent(ev.Object)
		mc.enqueue(ev.Ref)
		return
	}
	if mc.isRelatedType(ev.Ref.Type) {
		if clusterScoped(ev.Ref.Type) {
			// A cluster-scoped object relates to parents of every
			// namespace: sync those whose customize answer named its
			// type, a superset of those it matches.
			for _, ref := range mc.parentsRelating(ev.Ref.Type) {
				mc.enqueue(ref)
			}
			return
		}
		// A related object changed: sync every parent of its namespace, a
		// superset of those that relate it.
		for _, p := range mc.api.List(mc.cfg.ParentType, ev.Ref.Namespace) {
			mc.enqueue(RefOf(p))
		}
		return
	}
	if _, ok := mc.types[ev.Ref.Type]; !ok {
		return
	}
	if _, controlled := controllerRef(ev.Object); !controlled {
		// An orphan: the parents whose selector it matches may adopt it,
		// unless it is gone or going (Metacontroller's onChildAdd and
		// onChildDelete).
		if ev.Type != Deleted && !isTerminating(ev.Object) {
			for _, ref := range mc.parentsSelecting(ev.Object, ev.Ref.Namespace) {
				mc.enqueue(ref)
			}
		}
		return
	}
	refs, _ := nested(ev.Object, "metadata", "ownerReferences")
	list, _ := refs.([]any)
	for _, r := range list {
		m, _ := r.(map[string]any)
		if c, _ := m["controller"].(bool); c && m["kind"] == mc.cfg.ParentKind {
			name, _ := m["name"].(string)
			mc.enqueue(Ref{Type: mc.cfg.ParentType, Namespace: ev.Ref.Namespace, Name: name})
		}
	}
}

func parentKey(ref Ref) string { return ref.Namespace + "/" + ref.Name }

// enqueue asks for a sync of the parent, creating its worker. Workers are
// keyed by namespace/name like Metacontroller's queue, so that a parent
// deleted and re-created under the same name is still never synced twice at
// once. They live until Stop.
func (mc *Metacontroller) enqueue(ref Ref) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.ctx == nil || mc.ctx.Err() != nil {
		return
	}
	key := parentKey(ref)
	w, ok := mc.workers[key]
	if !ok {
		w = &parentWorker{mc: mc, ref: ref, dirty: make(chan struct{}, 1), resched: make(chan struct{}, 1)}
		mc.workers[key] = w
		mc.wg.Add(1)
		go w.run()
	}
	w.poke()
}

// Enqueue forces a sync of a parent, as any watch event would.
func (mc *Metacontroller) Enqueue(namespace, name string) {
	mc.enqueue(Ref{Type: mc.cfg.ParentType, Namespace: namespace, Name: name})
}

type parentWorker struct {
	mc      *Metacontroller
	ref     Ref
	dirty   chan struct{}
	resched chan struct{}

	mu       sync.Mutex
	nextAt   time.Time
	failures int
}

func (w *parentWorker) poke() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

// requeueAfter schedules a sync; the earliest pending time wins, as in
// client-go's delaying queue.
func (w *parentWorker) requeueAfter(d time.Duration) {
	w.mu.Lock()
	t := time.Now().Add(d)
	if w.nextAt.IsZero() || t.Before(w.nextAt) {
		w.nextAt = t
	}
	w.mu.Unlock()
	select {
	case w.resched <- struct{}{}:
	default:
	}
}

func (w *parentWorker) run() {
	defer w.mc.wg.Done()
	ctx := w.mc.ctx
	for {
		w.mu.Lock()
		next := w.nextAt
		w.mu.Unlock()
		var timer <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(time.Until(next))
			timer = t.C
		}
		fired, resched := false, false
		select {
		case <-ctx.Done():
		case <-w.resched:
			resched = true
		case <-w.dirty:
		case <-timer:
			fired = true
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		if resched {
			continue
		}
		if fired {
			w.mu.Lock()
			if !w.nextAt.After(time.Now()) {
				w.nextAt = time.Time{}
			}
			w.mu.Unlock()
		}
		select {
		case w.mc.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		err := w.mc.syncParent(ctx, w)
		<-w.mc.sem
		if ctx.Err() != nil {
			return
		}
		var ra retryAfterError
		switch {
		case errors.As(err, &ra):
			w.requeueAfter(ra.after)
		case err != nil:
			w.mu.Lock()
			d := w.mc.cfg.BackoffBase << min(w.failures, 30)
			if d > w.mc.cfg.BackoffMax || d <= 0 {
				d = w.mc.cfg.BackoffMax
			}
			w.failures++
			w.mu.Unlock()
			w.mc.cfg.Logf("metacontroller: sync %s failed, retry in %s: %v", parentKey(w.ref), d, err)
			w.requeueAfter(d)
		default:
			w.mu.Lock()
			w.failures = 0
			w.mu.Unlock()
		}
		if w.mc.cfg.ResyncPeriod > 0 {
			w.requeueAfter(w.mc.cfg.ResyncPeriod)
		}
	}
}

// retryAfterError is a 429 with Retry-After: retried later, not an error.
type retryAfterError struct{ after time.Duration }

func (e retryAfterError) Error() string { return fmt.Sprintf("hook asked to retry after %s", e.after) }
