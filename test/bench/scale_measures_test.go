package bench

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// What a phase measured, derived: rates, CPU per sync, and the report's
// number formats.

// healthy are the syncs of the healthy clusters, plain and TLS.
func (p *phaseResult) healthy() []time.Duration { return slices.Concat(p.plain, p.tls) }

type kindSyncs struct {
	name  string
	syncs []time.Duration
}

// kinds are the healthy syncs by kind, those the phase had.
func (p *phaseResult) kinds() []kindSyncs {
	var out []kindSyncs
	if len(p.plain) > 0 {
		out = append(out, kindSyncs{"plain", p.plain})
	}
	if len(p.tls) > 0 {
		out = append(out, kindSyncs{"TLS", p.tls})
	}
	return out
}

// syncs counts every sync of the phase, of every cluster alike.
func (p *phaseResult) syncs() int { return len(p.plain) + len(p.tls) + len(p.unreachable) }

// clusters counts the distinct clusters of a phase that synced each at
// least once.
func (p *phaseResult) clusters() int { return p.nTargets }

// rate is syncs per second, of every cluster alike.
func (p *phaseResult) rate() float64 { return float64(p.syncs()) / p.wall.Seconds() }

// keptUp: the last hundredth of the phase's syncs waited, at the median,
// no longer than keptUpWait for a worker.
func (p *phaseResult) keptUp() bool { return p.endWait() <= keptUpWait }

func (p *phaseResult) endWait() time.Duration {
	if len(p.waits) == 0 {
		return 0
	}
	return pct(p.waits[len(p.waits)-max(1, len(p.waits)/100):], 50)
}

// othersCores are the cores other processes than the hooks and this one
// used in the phase.
func (p *phaseResult) othersCores() float64 {
	return max(0, cores(p.machineCPU-p.hookCPU()-p.testCPU, p.wall))
}

// idlePerSync is the hooks' idle CPU spread over a phase's syncs: what
// its CPU per sync owes to time rather than to syncs.
func (fr *fleetResult) idlePerSync(p *phaseResult) time.Duration {
	if fr.idle.wall == 0 || p.syncs() == 0 {
		return 0
	}
	perSecond := float64(fr.idle.hook) / fr.idle.wall.Seconds() * float64(len(p.hooks))
	return time.Duration(perSecond * p.wall.Seconds() / float64(p.syncs()))
}

// busy is the part of the machine's cores used in the phase, by anything.
func (p *phaseResult) busy() float64 {
	return cores(p.machineCPU, p.wall) / float64(runtime.NumCPU())
}

func (p *phaseResult) hookCPU() time.Duration {
	var sum time.Duration
	for _, h := range p.hooks {
		sum += h.cpu
	}
	return sum
}

// cpuPerSync is the hooks' CPU time per sync of the phase, whatever the
// cluster.
func (p *phaseResult) cpuPerSync() time.Duration {
	return p.hookCPU() / time.Duration(max(1, p.syncs()))
}

// dialsPerSync are the connections the sims accepted per healthy sync.
func (p *phaseResult) dialsPerSync() float64 {
	return perSync(p.calls.conns+p.tlsCalls.conns, len(p.plain)+len(p.tls))
}

func (p *phaseResult) replicaCPUs() string {
	var out []string
	for i, h := range p.hooks {
		out = append(out, fmt.Sprintf("%d: %s", i+1, ms(h.cpuPerSync())))
	}
	return strings.Join(out, ", ")
}

func (h hookUsage) cpuPerSync() time.Duration { return h.cpu / time.Duration(max(1, h.syncs)) }

func (p *phaseResult) summary() string {
	return fmt.Sprintf("%d syncs in %s (%.1f/s of %.1f due), healthy p50 %s p99 %s, hook CPU per sync %s, %.2f dials per healthy sync, machine %.0f%% busy",
		p.syncs(), p.wall.Round(100*time.Millisecond), p.rate(), p.due, ms(pct(p.healthy(), 50)), ms(pct(p.healthy(), 99)), ms(p.cpuPerSync()), p.dialsPerSync(), 100*p.busy())
}

// workerShare is the part of the workers' time that went into the given
// syncs, counted from due to done: time for which no other cluster could
// be synced.
func (p *phaseResult) workerShare(syncs []time.Duration, workers int) string {
	var busy time.Duration
	for _, d := range syncs {
		busy += d
	}
	return fmt.Sprintf("%.0f%%", 100*busy.Seconds()/(p.wall.Seconds()*float64(workers)))
}

func metricRatio(a, b map[string]float64, name string) string {
	va, okA := a[name]
	vb, okB := b[name]
	if !okA || !okB || vb == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", va/vb)
}

func callsRow(label string, c simCounts, syncs int) string {
	per := func(n int64) string { return fmt.Sprintf("%.2f", perSync(n, syncs)) }
	var unexpected int64
	for _, n := range c.unexpected {
		unexpected += n
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %d |", label,
		per(c.calls[rpcStatus]), per(c.calls[rpcListLinearizable]), per(c.calls[rpcListSerializable]), per(c.conns), unexpected)
}

func perSync(n int64, syncs int) float64 {
	if syncs == 0 {
		return 0
	}
	return float64(n) / float64(syncs)
}

func metric(m map[string]float64, name string, format func(float64) string) string {
	if v, ok := m[name]; ok {
		return format(v)
	}
	return "-"
}

func mib(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// cores is CPU time over a wall time: how many cores it kept busy.
func cores(cpu, wall time.Duration) float64 { return cpu.Seconds() / wall.Seconds() }

// cores10 is the cores a CPU time per sync takes at a rate.
func cores10(perSync time.Duration, rate float64) float64 { return perSync.Seconds() * rate }

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
