package harness

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestNon200AppliesNothing: while the hook path answers 500, neither children
// nor status change, and the sync is retried with a growing backoff.
func TestNon200AppliesNothing(t *testing.T) {
	env, fake := newEnvWithFake(t, Options{})
	fake.set(func(f *fakeConfig) { f.noPods = true })
	const cluster = "five"
	if _, err := env.MC.CreateParent(ns, cluster, map[string]any{"size": 1}); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(10*time.Second, "first sync applied", func() (bool, string) {
		p, _ := env.MC.Parent(ns, cluster)
		return nestedMap(p, "status")["observedGeneration"] == float64(1), fmt.Sprint(nestedMap(p, "status"))
	}))
	statusBefore := func() map[string]any { p, _ := env.MC.Parent(ns, cluster); return nestedMap(p, "status") }()
	errsBefore := env.MC.Metrics(ns, cluster).HookErrors

	remove := env.Proxy.Inject(Fault{Path: "/sync", Status: http.StatusInternalServerError, Body: "injected"})
	fake.set(func(f *fakeConfig) { f.extraService, f.statusNote = true, "changed" })
	if _, err := env.MC.MergePatchParentSpec(ns, cluster, map[string]any{"size": 3}); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(10*time.Second, "six failed syncs", func() (bool, string) {
		m := env.MC.Metrics(ns, cluster)
		return m.HookErrors-errsBefore >= 6, fmt.Sprintf("%+v", m)
	}))
	if _, ok := env.API.Get(Ref{Type: TypeService, Namespace: ns, Name: cluster + "-extra"}); ok {
		t.Error("a child from a 500 answer was created")
	}
	p, _ := env.MC.Parent(ns, cluster)
	if d := cmp.Diff(statusBefore, nestedMap(p, "status")); d != "" {
		t.Errorf("status changed during 500s (-before +after):\n%s", d)
	}
	if g, _ := nestedInt(p, "metadata", "generation"); g != 2 {
		t.Errorf("generation after the spec patch = %d, want 2", g)
	}
	// Backoff: the gaps between failed attempts grow.
	var fails []time.Time
	for _, r := range env.MC.Records(ns, cluster) {
		if r.HTTPStatus == http.StatusInternalServerError {
			fails = append(fails, r.Start)
		}
	}
	if n := len(fails); n >= 6 {
		early, late := fails[2].Sub(fails[1]), fails[n-1].Sub(fails[n-2])
		if late <= early {
			t.Errorf("backoff does not grow: gap %s early, %s late", early, late)
		}
	}
	remove()
	mustWait(t, env.WaitFor(10*time.Second, "answer applied after the fault", func() (bool, string) {
		_, ok := env.API.Get(Ref{Type: TypeService, Namespace: ns, Name: cluster + "-extra"})
		p, _ := env.MC.Parent(ns, cluster)
		st := nestedMap(p, "status")
		return ok && st["note"] == "changed" && st["observedGeneration"] == float64(2), fmt.Sprint(ok, st)
	}))

	// A dropped response: the hook is called, Metacontroller never sees its
	// answer and applies nothing.
	remove = env.Proxy.Inject(Fault{Path: "/sync", DropResponse: true})
	callsBefore, dropped := len(fake.Calls(ns+"/"+cluster)), time.Now()
	fake.set(func(f *fakeConfig) { f.statusNote = "dropped" })
	env.MC.Enqueue(ns, cluster)
	mustWait(t, env.WaitFor(10*time.Second, "two dropped answers", func() (bool, string) {
		n := 0
		for _, r := range env.MC.Records(ns, cluster) {
			if r.Start.After(dropped) && r.Err != nil && r.HTTPStatus == 0 {
				n++
			}
		}
		return n >= 2 && env.Proxy.DroppedResponses.Load() >= 2, fmt.Sprint(n, " failed records")
	}))
	if n := len(fake.Calls(ns+"/"+cluster)) - callsBefore; n < 2 {
		t.Errorf("the hook saw %d calls while its answers were dropped, want >= 2", n)
	}
	if p, _ := env.MC.Parent(ns, cluster); nestedMap(p, "status")["note"] != "changed" {
		t.Errorf("a dropped answer was applied: status %v", nestedMap(p, "status"))
	}
	remove()
	mustWait(t, env.WaitFor(10*time.Second, "answer applied after the dropped ones", func() (bool, string) {
		p, _ := env.MC.Parent(ns, cluster)
		st := nestedMap(p, "status")
		return st["note"] == "dropped", fmt.Sprint(st)
	}))
}

// TestResyncAfterSeconds: the hook's resyncAfterSeconds paces syncs when
// nothing else happens, and without it a steady status causes no more syncs.
func TestResyncAfterSeconds(t *testing.T) {
	env, fake := newEnvWithFake(t, Options{})
	fake.set(func(f *fakeConfig) { f.noPods, f.resyncAfter = true, 0.4 })
	const cluster = "pace"
	if _, err := env.MC.CreateParent(ns, cluster, map[string]any{"size": 1}); err != nil {
		t.Fatal(err)
	}
	// Let the creation burst (finalizer, children, status events) settle.
	time.Sleep(time.Second)
	start := len(fake.Calls(ns + "/" + cluster))
	time.Sleep(2 * time.Second)
	calls := fake.Calls(ns + "/" + cluster)[start:]
	if n := len(calls); n < 4 || n > 6 {
		t.Errorf("%d syncs in 2 s with resyncAfterSeconds 0.4, want about 5", n)
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].At.Sub(calls[i-1].At); gap < 350*time.Millisecond {
			t.Errorf("sync %d came %s after the previous one, before resyncAfterSeconds", i, gap)
		}
	}
	fake.set(func(f *fakeConfig) { f.resyncAfter = 0 })
	time.Sleep(time.Second) // the pending resync fires once more
	quiet := len(fake.Calls(ns + "/" + cluster))
	time.Sleep(1500 * time.Millisecond)
	if n := len(fake.Calls(ns+"/"+cluster)) - quiet; n != 0 {
		t.Errorf("%d syncs without resyncAfterSeconds and without events, want 0", n)
	}
}
