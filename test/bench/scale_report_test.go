package bench

import (
	"fmt"
	"strings"
	"time"
)

// The hook's own metrics the report shows, from its Go collector.
const (
	metricGoroutines = "go_goroutines"
	metricHeapInUse  = "go_memstats_heap_inuse_bytes"
)

// scaleReport renders the scale benchmark's tables: latency and the hook's
// memory by phase, then what etcd served per healthy sync.
func scaleReport(warm simCounts, warmSyncs int, alone, mixed phaseResult) string {
	lines := []string{
		"| syncs of (due to done) | count | p50 | p99 | max | syncs/s | worker time | hook RSS (target ≤ 64 MiB) | peak RSS | threads | goroutines | heap in use |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|",
		phaseRow("healthy clusters, alone", alone),
		phaseRow(fmt.Sprintf("healthy clusters, %d unreachable interleaved", len(unreachableAt)), mixed),
		fmt.Sprintf("| ratio, interleaved / alone | | %.2f | %.2f | %.2f | %.2f | | | | | | |",
			ratio(pct(mixed.healthy, 50), pct(alone.healthy, 50)),
			ratio(pct(mixed.healthy, 99), pct(alone.healthy, 99)),
			ratio(pct(mixed.healthy, 100), pct(alone.healthy, 100)),
			mixed.rate()/alone.rate()),
		fmt.Sprintf("| unreachable clusters | %d | %s | %s | %s | | %s | | | | | |",
			len(mixed.unreachable), us(pct(mixed.unreachable, 50)), us(pct(mixed.unreachable, 99)), us(pct(mixed.unreachable, 100)),
			mixed.workerShare(mixed.unreachable)),
		"",
		"| etcd calls per healthy sync | Status | MemberList (linearizable) | MemberList (serializable) | connections accepted | unexpected calls |",
		"|---|---|---|---|---|---|",
		callsRow("first sync of each cluster", warm, warmSyncs),
		callsRow("healthy clusters alone", alone.calls, len(alone.healthy)),
		callsRow("unreachable interleaved", mixed.calls, len(mixed.healthy)),
	}
	return strings.Join(lines, "\n") + "\n"
}

// rate is syncs per second, healthy and unreachable alike.
func (p phaseResult) rate() float64 {
	return float64(len(p.healthy)+len(p.unreachable)) / p.wall.Seconds()
}

// workerShare is the part of the workers' time that went into the given
// syncs, counted from due to done: time for which no other cluster could
// be synced.
func (p phaseResult) workerShare(syncs []time.Duration) string {
	var busy time.Duration
	for _, d := range syncs {
		busy += d
	}
	return fmt.Sprintf("%.0f%%", 100*busy.Seconds()/(p.wall.Seconds()*scaleWorkers))
}

func phaseRow(label string, p phaseResult) string {
	return fmt.Sprintf("| %s | %d | %s | %s | %s | %.0f | %s | %s | %s | %d | %s | %s |",
		label, len(p.healthy), us(pct(p.healthy, 50)), us(pct(p.healthy, 99)), us(pct(p.healthy, 100)), p.rate(), p.workerShare(p.healthy),
		mib(float64(p.hook.rss)), mib(float64(p.hook.peakRSS)), p.hook.threads,
		metric(p.metrics, metricGoroutines, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		metric(p.metrics, metricHeapInUse, mib))
}

func callsRow(label string, c simCounts, syncs int) string {
	per := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/float64(syncs)) }
	var unexpected int64
	for _, n := range c.unexpected {
		unexpected += n
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %d |", label,
		per(c.calls[rpcStatus]), per(c.calls[rpcListLinearizable]), per(c.calls[rpcListSerializable]), per(c.conns), unexpected)
}

func metric(m map[string]float64, name string, format func(float64) string) string {
	if v, ok := m[name]; ok {
		return format(v)
	}
	return "-"
}

func mib(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }
