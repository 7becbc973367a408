package bench

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
	"github.com/etcdhook/etcd-hook/reconcile"
)

// syncFloor is the hook's own work for one steady sync of one kind of
// cluster, with no network: measured in this process, on the hook's own
// packages (hooks.Decode, reconcile.Reconciler.Sync, hooks.Encode), with
// etcd's answer replayed from one real read of the cluster's etcdSim.
// cost_test.go's benchmarks give the hook's latency against a floor that
// moves the same JSON, not its CPU time; this is the CPU time.
type syncFloor struct {
	kind string
	// request is the size of the fleet's steady request, answer that of
	// the hook's answer to it. full is the size of the request a real
	// steady cluster sends: the same, with the Services, the disruption
	// budget and the NetworkPolicies the hook answered, as the API server
	// serves them back (appliedAsAnswered, as the hook-cost rig sends).
	request, answer, full int
	// CPU time per request, the collector aside: decoding alone
	// (hooks.Decode), and decode, plan and encode together (a sync
	// without its network), of the fleet's request and of the full one.
	decode, sync, fullDecode, fullSync time.Duration
	// syncAlloc and fullSyncAlloc are the bytes a sync allocates, which
	// the hook's collector pays for.
	syncAlloc, fullSyncAlloc float64
}

// cpuWindows and cpuWindow: each floor is the least of cpuWindows
// measurements of cpuWindow each, the one least disturbed by whatever
// else the machine did. The collector is off in a window, which ends
// early once windowAlloc bytes are allocated.
const (
	cpuWindows  = 5
	cpuWindow   = 300 * time.Millisecond
	windowAlloc = 256 << 20
)

// measureSyncFloors measures the floor of the first healthy plain and the
// first healthy TLS cluster of the fleet.
func measureSyncFloors(t *testing.T, healthy []target) []syncFloor {
	var out []syncFloor
	for _, withTLS := range []bool{false, true} {
		i := slices.IndexFunc(healthy, func(tg target) bool { return (tg.cluster.tls != nil) == withTLS })
		if i < 0 {
			continue
		}
		out = append(out, measureSyncFloor(t, healthy[i]))
	}
	return out
}

func measureSyncFloor(t *testing.T, tg target) syncFloor {
	pool := etcdclient.NewPool(0)
	defer pool.Close()
	dialer := &replayDialer{pool: pool}
	rec := &reconcile.Reconciler{Dialer: dialer, Recorder: nopRecorder{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	syncOnce := func(body []byte) (etcdcluster.Decision, []byte) {
		o, err := hooks.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		d, err := rec.Sync(ctx, o, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := hooks.Encode(d, false)
		if err != nil {
			t.Fatal(err)
		}
		return d, out
	}
	decode := func(body []byte) {
		if _, err := hooks.Decode(body); err != nil {
			t.Fatal(err)
		}
	}
	d, answer := syncOnce(tg.request)
	if _, err := steadyStatus(answer, tg.cluster.members); err != nil {
		t.Fatalf("%s, in this process: %v", tg.cluster.name, err)
	}
	full, err := appliedAsAnswered(tg.request, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, fullAnswer := syncOnce(full); !steadyAnswer(fullAnswer, tg.cluster.members) {
		t.Fatalf("%s: the full steady request is not answered steady: %.300s", tg.cluster.name, fullAnswer)
	}
	if dialer.reads != 1 {
		t.Fatalf("%s: %d reads of etcd, want 1 replayed", tg.cluster.name, dialer.reads)
	}
	f := syncFloor{kind: "plain", request: len(tg.request), answer: len(answer), full: len(full)}
	if tg.cluster.tls != nil {
		f.kind = "TLS"
	}
	f.decode, _ = cpuPerCall(t, func() { decode(tg.request) })
	f.sync, f.syncAlloc = cpuPerCall(t, func() { syncOnce(tg.request) })
	f.fullDecode, _ = cpuPerCall(t, func() { decode(full) })
	f.fullSync, f.fullSyncAlloc = cpuPerCall(t, func() { syncOnce(full) })
	return f
}

func steadyAnswer(answer []byte, members []string) bool {
	_, err := steadyStatus(answer, members)
	return err == nil
}

// cpuPerCall is the CPU time this process spends per call of fn, called
// again and again for cpuWindow: the least of cpuWindows such windows.
// Nothing else runs in the process meanwhile (the hooks are idle), and
// the collector is off: this process's heap (every request of the fleet,
// the sims) is not the hook's, and a window would count a few of its
// collections or none. What the collector costs the hook follows from
// the bytes fn allocates, also returned. getrusage counts CPU time to the
// microsecond, where /proc/<pid>/stat counts clock ticks.
func cpuPerCall(t *testing.T, fn func()) (time.Duration, float64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 5 {
		fn()
	}
	runtime.ReadMemStats(&after)
	alloc := float64(after.TotalAlloc-before.TotalAlloc) / 5
	maxCalls := max(20, int(windowAlloc/max(alloc, 1)))

	var windows []time.Duration
	for range cpuWindows {
		runtime.GC()
		gcPercent := debug.SetGCPercent(-1)
		start, err := selfCPU()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for wall := time.Now(); n < maxCalls && (time.Since(wall) < cpuWindow || n < 20); n++ {
			fn()
		}
		end, err := selfCPU()
		debug.SetGCPercent(gcPercent)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, (end-start)/time.Duration(n))
	}
	runtime.GC()
	return slices.Min(windows), alloc
}

// selfCPU is this process's CPU time, user and system.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// replayDialer is the pool's Dialer, whose clusters read etcd once and
// then answer every Membership with a copy of that read: a sync with
// etcd's answer and no network.
type replayDialer struct {
	pool *etcdclient.Pool

	mu    sync.Mutex
	read  *membership.Membership
	reads int
}

// Cluster implements etcdclient.Dialer.
func (d *replayDialer) Cluster(endpoints []string, creds *etcdclient.ClientTLS) (etcdclient.Cluster, error) {
	c, err := d.pool.Cluster(endpoints, creds)
	if err != nil {
		return nil, err
	}
	return replayCluster{Cluster: c, d: d}, nil
}

type replayCluster struct {
	etcdclient.Cluster
	d *replayDialer
}

func (c replayCluster) Membership(ctx context.Context) (*membership.Membership, error) {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.d.read == nil {
		ms, err := c.Cluster.Membership(ctx)
		if err != nil {
			return nil, err
		}
		c.d.read, c.d.reads = ms, c.d.reads+1
	}
	return cloneMembership(c.d.read), nil
}

// cloneMembership copies a read, so that no sync sees what another one
// did to it.
func cloneMembership(ms *membership.Membership) *membership.Membership {
	out := *ms
	out.Members = slices.Clone(ms.Members)
	for i := range out.Members {
		m := &out.Members[i]
		m.PeerURLs, m.ClientURLs, m.Errors = slices.Clone(m.PeerURLs), slices.Clone(m.ClientURLs), slices.Clone(m.Errors)
	}
	return &out
}
