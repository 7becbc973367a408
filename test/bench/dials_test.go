package bench

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/etcdclient"
)

// dialTimes are steady syncs and syncs on new connections, and the etcd
// read alone likewise, from one rig.
type dialTimes struct {
	steady, fresh             []time.Duration
	steadyRead, freshRead     []time.Duration
	steadyAllocs, freshAllocs float64
}

// dials times the first sync of the cluster on new connections, as a hook
// that just started, or that closed the cluster's connections (it keeps a
// bounded number), makes it: a TCP connection per member, with a TLS
// handshake for TLS members, and the client certificate parsed again.
// Steady syncs alternate with them, so that the machine's noise weighs on
// both alike; the etcd read is timed alone the same way. It replaces the
// rig's connections, so it runs last.
func (r *rig) dials(t *testing.T, samples int) dialTimes {
	var d dialTimes
	for i := range samples {
		steady := func() {
			d.steady = append(d.steady, r.timedSync(t))
			d.steadyRead = append(d.steadyRead, r.timedFreshRead(t, false))
		}
		fresh := func() {
			r.dialer.renew()
			d.fresh = append(d.fresh, r.timedSync(t))
			r.dialer.renew()
			d.freshRead = append(d.freshRead, r.timedFreshRead(t, true))
		}
		if i%2 == 0 {
			steady()
			fresh()
		} else {
			fresh()
			steady()
		}
	}
	const n = 20
	d.steadyAllocs = mallocs(func() {
		for range n {
			r.timedSync(t)
		}
	}) / n
	d.freshAllocs = mallocs(func() {
		for range n {
			r.dialer.renew()
			r.timedSync(t)
		}
	}) / n
	r.etcd = r.cluster(t)
	return d
}

// timedSync is timed("/sync"), checking that the answer is steady: a sync
// whose members did not answer would be fast and wrong.
func (r *rig) timedSync(t *testing.T) time.Duration {
	start := time.Now()
	out := r.post(t, "/sync")
	took := time.Since(start)
	if !bytes.Contains(out, []byte(`"reason":"Converged"`)) {
		t.Fatalf("hook answer is not steady: %.400s", out)
	}
	return took
}

// timedFreshRead reads the cluster as a sync does, from taking the
// cluster from the pool (which parses the client certificate if the pool
// has not yet) to every member's answer.
func (r *rig) timedFreshRead(t *testing.T, afterRenew bool) time.Duration {
	start := time.Now()
	ms, err := r.cluster(t).Membership(context.Background())
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms.Members {
		if !m.Reachable {
			t.Fatalf("member %s did not answer (new connections: %t)", m.Name, afterRenew)
		}
	}
	return took
}

func (r *rig) cluster(t *testing.T) etcdclient.Cluster {
	c, err := r.dialer.Cluster(r.endpoints, r.dialer.creds())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mallocs counts the heap allocations fn makes in this process.
func mallocs(fn func()) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs - before.Mallocs)
}

// connectionCosts measures what the hook keeps per connection to a member
// that serves plain HTTP, and to one that serves TLS: heap and goroutine
// stacks after each was up and used once, n of each (as
// etcdclient.TestConnectionCostReport does for plain ones). And what a
// parsed client certificate costs the pool's cache, which keeps one per
// Secret version, as many as it keeps connections.
func connectionCosts(t *testing.T, n int) []string {
	plain := newRig(t, 1, false)
	secure := newRig(t, 1, true)
	creds := secure.dialer.creds()
	lines := []string{
		fmt.Sprintf("| kept by the hook (%d of each, up and used once) | heap | goroutine stacks | goroutines |", n),
		"|---|---|---|---|",
	}
	for _, c := range []struct {
		label    string
		endpoint string
		creds    *etcdclient.ClientTLS
	}{
		{"a connection to a plain member", plain.dialer.byPod["m0"], nil},
		{"a connection to a TLS member", secure.dialer.byPod["m0"], creds},
	} {
		pool := etcdclient.NewPool(n)
		t.Cleanup(pool.Close)
		heap, stacks, goroutines := retained(func() {
			for i := range n {
				// One member, many endpoints: the pool keys connections
				// by endpoint, and a path makes each its own.
				cl, err := pool.Cluster([]string{fmt.Sprintf("%s/%d", c.endpoint, i)}, c.creds)
				if err != nil {
					t.Fatal(err)
				}
				ms, err := cl.Membership(context.Background())
				if err != nil || !ms.Members[0].Reachable {
					t.Fatalf("%s: %v", c.label, err)
				}
			}
		})
		lines = append(lines, fmt.Sprintf("| %s | %.1f KiB | %.1f KiB | %.1f |", c.label, heap/float64(n)/1024, stacks/float64(n)/1024, goroutines/float64(n)))
	}
	pool := etcdclient.NewPool(n)
	t.Cleanup(pool.Close)
	heap, _, _ := retained(func() {
		for i := range n {
			// Parsed by Cluster, kept by ID; no call, so no connection.
			id := *creds
			id.ID = fmt.Sprintf("ns/secret-%d/uid/1", i)
			if _, err := pool.Cluster([]string{"https://127.0.0.1:1"}, &id); err != nil {
				t.Fatal(err)
			}
		}
	})
	lines = append(lines, fmt.Sprintf("| a parsed client certificate (one per operator Secret version) | %.1f KiB | | |", heap/float64(n)/1024))
	return lines
}

// retained is the heap, stacks and goroutines fn leaves behind.
func retained(fn func()) (heap, stacks, goroutines float64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g := runtime.NumGoroutine()
	fn()
	// Let connections that were just used settle.
	time.Sleep(100 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(after.HeapInuse) - float64(before.HeapInuse), float64(after.StackInuse) - float64(before.StackInuse), float64(runtime.NumGoroutine() - g)
}
