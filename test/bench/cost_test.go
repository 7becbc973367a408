package bench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var memberCounts = []int{1, 3, 5, 7}

// BenchmarkSync reports ns/op and allocs/op of a steady-state sync and of
// the echo floor, over loopback HTTP; compare the pairs with benchstat.
func BenchmarkSync(b *testing.B) {
	for _, n := range memberCounts {
		r := newRig(b, n, false)
		for _, path := range []string{"/sync", "/echo"} {
			b.Run(fmt.Sprintf("members=%d/%s", n, strings.TrimPrefix(path, "/")), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(r.request)))
				for b.Loop() {
					r.post(b, path)
				}
			})
		}
	}
}

// TestHookCostReport prints the hook-cost tables of BENCHMARKS.md: a
// steady sync against the floor, for members serving plain HTTP and TLS;
// the first sync on new connections against a steady one; and what a kept
// connection and a parsed client certificate cost. It runs only when asked
// (BENCH_REPORT=1, set by make bench), since it measures rather than
// checks.
func TestHookCostReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench) to measure")
	}
	samples := envInt("BENCH_SAMPLES", 2000)
	window := time.Duration(envInt("BENCH_WINDOW_MS", 2000)) * time.Millisecond
	// Every sync on new connections leaves a connection per member in
	// TIME_WAIT; a tenth of the samples keeps them well inside the port
	// range.
	dialSamples := max(20, samples/10)
	cost := []string{
		"| members | etcd | request | hook p50 | floor p50 | ratio | etcd read p50 | × (floor + read) | floor that reads p50 | × floor that reads | hook's own above it | hook p99 | floor p99 | ratio | hook syncs/s | floor /s | ratio | hook allocs | floor allocs | ratio |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
	}
	dials := []string{
		"| members | etcd | steady sync p50 | sync on new connections p50 | added | steady etcd read p50 | read on new connections p50 | added | hook allocs, new connections / steady |",
		"|---|---|---|---|---|---|---|---|---|",
	}
	for _, n := range memberCounts {
		for _, mode := range []rigMode{rigPlain, rigStaticTLS, rigAutoTLS} {
			// A subtest each, so that each rig's members stop before the
			// next rig's start.
			t.Run(fmt.Sprintf("members=%d/mode=%d", n, mode), func(t *testing.T) {
				r := newRigMode(t, n, mode)
				hook, echo, read, readingEcho := r.latencies(t, samples)
				hookRate, echoRate := r.throughput(t, "/sync", window), r.throughput(t, "/echo", window)
				hookAllocs, echoAllocs := r.allocs(t, "/sync", 200), r.allocs(t, "/echo", 200)
				// The target is stated against floor + read: the hook cannot
				// answer sooner than the floor's work plus one etcd round
				// trip, so what it takes above that is its own. Both are
				// reported: the medians of the two timed apart, added; and
				// the floor that makes the read itself, in the request.
				floorRead := pct(echo, 50) + pct(read, 50)
				reading := pct(readingEcho, 50)
				cost = append(cost, fmt.Sprintf("| %d | %s | %d KiB | %s | %s | %.2f | %s | %.2f | %s | %.2f | %s | %s | %s | %.2f | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |",
					n, r.kind(), len(r.request)/1024,
					us(pct(hook, 50)), us(pct(echo, 50)), ratio(pct(hook, 50), pct(echo, 50)),
					us(pct(read, 50)), ratio(pct(hook, 50), floorRead),
					us(reading), ratio(pct(hook, 50), reading), us(pct(hook, 50)-reading),
					us(pct(hook, 99)), us(pct(echo, 99)), ratio(pct(hook, 99), pct(echo, 99)),
					hookRate, echoRate, hookRate/echoRate,
					hookAllocs, echoAllocs, hookAllocs/echoAllocs))
				// Last: it replaces the rig's connections.
				d := r.dials(t, dialSamples)
				dials = append(dials, fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %s | %s | %.0f / %.0f |",
					n, r.kind(),
					us(pct(d.steady, 50)), us(pct(d.fresh, 50)), us(pct(d.fresh, 50)-pct(d.steady, 50)),
					us(pct(d.steadyRead, 50)), us(pct(d.freshRead, 50)), us(pct(d.freshRead, 50)-pct(d.steadyRead, 50)),
					d.freshAllocs, d.steadyAllocs))
			})
		}
	}
	var mem []string
	t.Run("connection cost", func(t *testing.T) { mem = connectionCosts(t, 300) })
	report := strings.Join(cost, "\n") + "\n\n" + strings.Join(dials, "\n") + "\n\n" + strings.Join(mem, "\n") + "\n"
	t.Logf("hook cost, %d samples each (%d on new connections), %d cores:\n%s", samples, dialSamples, runtime.NumCPU(), report)
	if path := os.Getenv("BENCH_REPORT_FILE"); path != "" {
		if err := writeFromModuleRoot(path, report); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHookCostAB is the hook against the floor that reads and nothing
// else, in blocks, for the A/B runs of BENCHMARKS.md: a ratio per block
// shows how much a run moves. BENCH_AB=1 runs it; BENCH_MEMBERS (1),
// BENCH_BLOCKS (6) and BENCH_BLOCK_SAMPLES (500) shape it, and
// -cpuprofile profiles it.
func TestHookCostAB(t *testing.T) {
	if os.Getenv("BENCH_AB") == "" {
		t.Skip("set BENCH_AB=1 to measure")
	}
	r := newRig(t, envInt("BENCH_MEMBERS", 1), false)
	for range 100 {
		r.post(t, "/sync")
		r.post(t, "/echo-read")
	}
	var hookAll, floorAll []time.Duration
	var ratios []float64
	for range envInt("BENCH_BLOCKS", 6) {
		var hook, floor []time.Duration
		for i := range envInt("BENCH_BLOCK_SAMPLES", 500) {
			// Each goes first in every other pair.
			if i%2 == 0 {
				hook = append(hook, r.timed(t, "/sync"))
			}
			floor = append(floor, r.timed(t, "/echo-read"))
			if i%2 == 1 {
				hook = append(hook, r.timed(t, "/sync"))
			}
		}
		ratios = append(ratios, ratio(pct(hook, 50), pct(floor, 50)))
		hookAll, floorAll = append(hookAll, hook...), append(floorAll, floor...)
	}
	slices.Sort(ratios)
	t.Logf("%s: hook p50 %s, floor that reads p50 %s: %.3f×; blocks %.3f–%.3f (median %.3f)", r,
		us(pct(hookAll, 50)), us(pct(floorAll, 50)), ratio(pct(hookAll, 50), pct(floorAll, 50)),
		ratios[0], ratios[len(ratios)-1], ratios[len(ratios)/2])
}

// latencies takes turns at the hook, the floor, the floor that reads and
// the etcd read of a steady sync on its own, rotating their order, so that
// whatever else the machine does weighs on all alike.
func (r *rig) latencies(t *testing.T, samples int) (hook, echo, read, readingEcho []time.Duration) {
	for range 50 {
		r.post(t, "/sync")
		r.post(t, "/echo")
		r.post(t, "/echo-read")
	}
	turns := []func(){
		func() { hook = append(hook, r.timed(t, "/sync")) },
		func() { echo = append(echo, r.timed(t, "/echo")) },
		func() { readingEcho = append(readingEcho, r.timed(t, "/echo-read")) },
		func() { read = append(read, r.timedRead(t)) },
	}
	for i := range samples {
		for j := range turns {
			turns[(i+j)%len(turns)]()
		}
	}
	return hook, echo, read, readingEcho
}

// throughput is requests per second with one client per core.
func (r *rig) throughput(t *testing.T, path string, window time.Duration) float64 {
	var done atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(window)
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				r.post(t, path)
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / window.Seconds()
}

// allocs counts heap allocations per request in this process: client and
// server alike, which is the same client work for hook and floor.
func (r *rig) allocs(t *testing.T, path string, n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		r.post(t, path)
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(n)
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

func envInt(name string, def int) int {
	var v int
	if _, err := fmt.Sscan(os.Getenv(name), &v); err == nil && v > 0 {
		return v
	}
	return def
}
