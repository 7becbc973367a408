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
	// The heap size at which the next collection starts: with GOGC=100,
	// twice what was live after the last one.
	metricNextGC = "go_memstats_next_gc_bytes"
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

// tlsScaleReport renders the second hook's tables: a fleet with TLS
// clusters among the plain ones, against the first hook's plain fleet.
func tlsScaleReport(fleet []fleetCluster, plain phaseResult, warm fleetCounts, p phaseResult) string {
	var nPlain, nTLS int
	for _, c := range fleet {
		if c.tls != nil {
			nTLS++
		} else {
			nPlain++
		}
	}
	first := fmt.Sprintf("1: %d plain (%d unreachable)", scaleClusters, len(unreachableAt))
	second := fmt.Sprintf("2: %d plain, %d TLS", nPlain, nTLS)
	lines := []string{
		"| hook | syncs of (due to done) | count | p50 | p99 | max | syncs/s | hook CPU per sync | hook RSS (target ≤ 64 MiB) | peak RSS | threads | goroutines | heap in use | next GC at |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
		hookRow(first, "healthy clusters, alone", plain.healthy, &plain),
	}
	// The process's columns go on hook 2's first row.
	proc := &p
	for _, k := range []struct {
		label string
		syncs []time.Duration
	}{{"plain clusters", p.healthy}, {"TLS clusters", p.tls}} {
		if len(k.syncs) > 0 {
			lines = append(lines, hookRow(second, k.label, k.syncs, proc))
			proc = nil
		}
	}
	if len(p.healthy) > 0 && len(p.tls) > 0 {
		lines = append(lines, fmt.Sprintf("| ratio in hook 2, TLS / plain clusters | | | %.2f | %.2f | %.2f | | | | | | | | |",
			ratio(pct(p.tls, 50), pct(p.healthy, 50)), ratio(pct(p.tls, 99), pct(p.healthy, 99)), ratio(pct(p.tls, 100), pct(p.healthy, 100))))
	}
	lines = append(lines,
		fmt.Sprintf("| ratio, hook 2 / hook 1 | | | | | | %.2f | %.2f | %.2f | %.2f | | %s | %s | %s |",
			p.rate()/plain.rate(), ratio(p.cpuPerSync(), plain.cpuPerSync()),
			float64(p.hook.rss)/float64(plain.hook.rss), float64(p.hook.peakRSS)/float64(plain.hook.peakRSS),
			metricRatio(p.metrics, plain.metrics, metricGoroutines), metricRatio(p.metrics, plain.metrics, metricHeapInUse),
			metricRatio(p.metrics, plain.metrics, metricNextGC)),
		"",
		"| etcd calls per sync, hook 2 | Status | MemberList (linearizable) | MemberList (serializable) | connections accepted (TLS: handshakes) | unexpected calls |",
		"|---|---|---|---|---|---|",
	)
	if nPlain > 0 {
		lines = append(lines, callsRow("first sync, plain clusters", warm.plain, nPlain), callsRow("plain clusters", p.calls, len(p.healthy)))
	}
	if nTLS > 0 {
		lines = append(lines, callsRow("first sync, TLS clusters", warm.tls, nTLS), callsRow("TLS clusters", p.tlsCalls, len(p.tls)))
	}
	return strings.Join(lines, "\n") + "\n"
}

// hookRow is one kind of syncs of a phase, with the hook process's
// figures when p is set.
func hookRow(hook, label string, syncs []time.Duration, p *phaseResult) string {
	row := fmt.Sprintf("| %s | %s | %d | %s | %s | %s |", hook, label, len(syncs), us(pct(syncs, 50)), us(pct(syncs, 99)), us(pct(syncs, 100)))
	if p == nil {
		return row + " | | | | | | | |"
	}
	return row + fmt.Sprintf(" %.0f | %s | %s | %s | %d | %s | %s | %s |",
		p.rate(), us(p.cpuPerSync()), mib(float64(p.hook.rss)), mib(float64(p.hook.peakRSS)), p.hook.threads,
		metric(p.metrics, metricGoroutines, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		metric(p.metrics, metricHeapInUse, mib), metric(p.metrics, metricNextGC, mib))
}

// cpuPerSync is the hook's CPU time per sync of the phase, whatever the
// cluster.
func (p phaseResult) cpuPerSync() time.Duration {
	return p.cpu / time.Duration(len(p.healthy)+len(p.tls)+len(p.unreachable))
}

func metricRatio(a, b map[string]float64, name string) string {
	va, okA := a[name]
	vb, okB := b[name]
	if !okA || !okB || vb == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", va/vb)
}

// rate is syncs per second, of every cluster alike.
func (p phaseResult) rate() float64 {
	return float64(len(p.healthy)+len(p.tls)+len(p.unreachable)) / p.wall.Seconds()
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
