package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// echoHook answers every sync with the status it was sent (less
// observedGeneration, which Metacontroller injects), as a hook that
// carries a phase from status to status does, and remembers what each
// request showed. With fail set it answers 500, which applies nothing.
type echoHook struct {
	srv  *httptest.Server
	fail atomic.Bool

	mu    sync.Mutex
	calls []echoCall
}

type echoCall struct {
	Path, UID, Mark string
	Terminating     bool
}

func newEchoHook(t *testing.T) *echoHook {
	h := &echoHook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Parent Object `json:"parent"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		status := nestedMap(req.Parent, "status")
		if status == nil {
			status = map[string]any{}
		}
		delete(status, "observedGeneration")
		h.mu.Lock()
		h.calls = append(h.calls, echoCall{Path: r.URL.Path, UID: nestedString(req.Parent, "metadata", "uid"),
			Mark: nestedString(status, "mark"), Terminating: isTerminating(req.Parent)})
		h.mu.Unlock()
		if h.fail.Load() {
			http.Error(w, "failing", http.StatusInternalServerError)
			return
		}
		writeJSON(w, map[string]any{"status": status, "children": []any{}, "finalized": true})
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *echoHook) Calls() []echoCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]echoCall(nil), h.calls...)
}

// settle waits until the hook has had no call for 300 ms.
func (h *echoHook) settle(t *testing.T) {
	t.Helper()
	n, quiet := len(h.Calls()), time.Now()
	waitUntil(t, 10*time.Second, "the syncs to settle", func() (bool, string) {
		if m := len(h.Calls()); m != n {
			n, quiet = m, time.Now()
		}
		return time.Since(quiet) > 300*time.Millisecond, fmt.Sprint(n, " calls")
	})
}

// TestParentCacheLag: with ParentCacheLag, a sync within the lag of a
// status write sees the status from before it, and the status the hook
// computed from that stale parent replaces the newer one, as with
// Metacontroller's informer cache and AtomicStatusUpdate; once the write
// is older than the lag, syncs see it; a parent created again under the
// same name is never served a version of the one before. The cache's
// clock is driven by the test, so the windows are exact.
func TestParentCacheLag(t *testing.T) {
	const lag = time.Second
	hook := newEchoHook(t)
	api := NewAPIServer()
	mc, err := NewMetacontroller(api, ControllerConfig{
		SyncURL: hook.srv.URL + "/sync", FinalizeURL: hook.srv.URL + "/finalize",
		ResyncPeriod: -1, BackoffMax: 50 * time.Millisecond, ParentCacheLag: lag,
	})
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	mc.now = func() time.Time { return time.Unix(0, clock.Load()) }
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mc.Start(ctx)
	defer mc.Stop()

	const name = "lagged"
	ref := mc.parentRef(ns, name)
	created, err := mc.CreateParent(ns, name, map[string]any{"size": 1})
	if err != nil {
		t.Fatal(err)
	}
	uid := nestedString(created, "metadata", "uid")
	status := func() map[string]any { p, _ := mc.Parent(ns, name); return nestedMap(p, "status") }
	waitUntil(t, 10*time.Second, "the first sync's status", func() (bool, string) {
		return status()["observedGeneration"] == float64(1), fmt.Sprint(status())
	})
	// Let the creation settle (the finalizer, the first status), and age.
	hook.settle(t)
	advance(10 * time.Second)

	// A status written by someone else (the previous sync, say): a sync
	// within the lag sees the status from before it, and writes back what
	// the hook made of that.
	before := len(hook.Calls())
	if _, err := api.UpdateStatus(ref, uid, map[string]any{"mark": "new", "observedGeneration": 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the sync after the write", func() (bool, string) {
		c := hook.Calls()
		return len(c) > before, fmt.Sprint(c[before:])
	})
	if c := hook.Calls()[before]; c.Mark != "" {
		t.Errorf("the sync right after the status write (within the lag of %s) saw mark %q, want the status from before the write", lag, c.Mark)
	}
	waitUntil(t, 10*time.Second, "the stale status written over the newer one", func() (bool, string) {
		_, has := status()["mark"]
		return !has, fmt.Sprint(status())
	})

	// A write the hook does not answer over (it fails meanwhile) is seen
	// once it is older than the lag, and not before.
	hook.settle(t)
	hook.fail.Store(true)
	before = len(hook.Calls())
	if _, err := api.UpdateStatus(ref, uid, map[string]any{"mark": "later", "observedGeneration": 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "two failed syncs after the write", func() (bool, string) {
		c := hook.Calls()
		return len(c) >= before+2, fmt.Sprint(c[before:])
	})
	for _, c := range hook.Calls()[before:] {
		if c.Mark != "" {
			t.Errorf("a sync within the lag saw mark %q, want none", c.Mark)
		}
	}
	advance(lag)
	hook.fail.Store(false)
	before = len(hook.Calls())
	mc.Enqueue(ns, name)
	waitUntil(t, 10*time.Second, "a sync that sees the write", func() (bool, string) {
		c := hook.Calls()
		return len(c) > before && c[len(c)-1].Mark == "later", fmt.Sprint(c[before:])
	})
	if got := nestedString(status(), "mark"); got != "later" {
		t.Errorf("status mark %q after a sync that saw it, want later", got)
	}

	// Deleted and created again under the same name: the new parent's
	// syncs never see the old one, whatever the lag.
	if err := mc.DeleteParent(ns, name); err != nil {
		t.Fatal(err)
	}
	advance(lag)
	mc.Enqueue(ns, name)
	waitUntil(t, 10*time.Second, "the parent finalized and gone", func() (bool, string) {
		_, ok := mc.Parent(ns, name)
		return !ok, fmt.Sprint(status())
	})
	before = len(hook.Calls())
	again, err := mc.CreateParent(ns, name, map[string]any{"size": 1})
	if err != nil {
		t.Fatal(err)
	}
	uid2 := nestedString(again, "metadata", "uid")
	waitUntil(t, 10*time.Second, "the new parent's first sync", func() (bool, string) {
		p, _ := mc.Parent(ns, name)
		return nestedMap(p, "status")["observedGeneration"] == float64(1), fmt.Sprint(hook.Calls()[before:])
	})
	for _, c := range hook.Calls()[before:] {
		if c.UID != uid2 || c.Terminating || c.Mark != "" {
			t.Errorf("a sync of the parent created again saw %+v, want uid %s, not terminating, no mark", c, uid2)
		}
	}

	// Off, syncs read the parent fresh.
	hook.settle(t)
	mc.SetParentCacheLag(0)
	before = len(hook.Calls())
	if _, err := api.UpdateStatus(ref, uid2, map[string]any{"mark": "fresh", "observedGeneration": 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the sync after the write", func() (bool, string) {
		c := hook.Calls()
		return len(c) > before, fmt.Sprint(c[before:])
	})
	if c := hook.Calls()[before]; c.Mark != "fresh" {
		t.Errorf("without the lag, the sync after the write saw mark %q, want fresh", c.Mark)
	}
}
