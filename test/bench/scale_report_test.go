package bench

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// The hook's own metrics the report shows, from its Go collector.
const (
	metricGoroutines = "go_goroutines"
	metricHeapInUse  = "go_memstats_heap_inuse_bytes"
	// The heap size at which the next collection starts: with GOGC=100,
	// twice what was live after the last one.
	metricNextGC = "go_memstats_next_gc_bytes"
	// Syncs a replica answered itself with --peers: its own (owned) and
	// those another replica forwarded (received), since it started.
	metricOwned    = `etcd_hook_sync_routing_total{outcome="owned"}`
	metricReceived = `etcd_hook_sync_routing_total{outcome="received"}`
)

// The fleet-scale issue's targets, for 10,000 clusters of 3 members (half
// TLS) resynced every minute by 16 workers. Runs of another shape are set
// against them too, for reference.
const (
	targetRSS = 256 << 20
	// targetP99 is the healthy clusters' sync p99, due to done.
	targetP99 = 50 * time.Millisecond
	// targetUnreachableRatio bounds a healthy p99 with the unreachable
	// clusters interleaved against without.
	targetUnreachableRatio = 1.10
	// targetCPU is the hook's CPU time per healthy sync.
	targetCPU = 2 * time.Millisecond
	// "Each replica's memory is roughly half": at most this part of one
	// hook's RSS.
	targetReplicaRSS = 0.6
	// "The load splits": each replica's share of the requests within
	// this many points of an even split.
	targetShareSlack = 0.05
	// A phase whose machine was busier than this part of its cores had
	// no core to spare: its latencies include waiting for one.
	saturatedBusy = 0.9
	// A phase whose last syncs waited longer than this for a worker did
	// not keep up with the rate they fell due at: its queue grew.
	keptUpWait = time.Second
	// Other processes using this many cores in a phase make the run a
	// noisy one.
	quietOthers = 0.1
)

// fleetResult is everything runFleet measured.
type fleetResult struct {
	shape                 scaleShape
	fleet                 []fleetCluster
	setup, warmWall, wall time.Duration
	// startRSS is the first hook just started, before any sync;
	// warmMemory the hook after the first syncs of the first clusters
	// and then of all (syncs: how many clusters).
	startRSS   procStatus
	warmMemory []hookUsage
	warm       fleetCounts
	// warmRetried are the first syncs of the first hook, and of the
	// replicas, that were made again (warmAttempts).
	warmRetried, replicaWarmRetried *problems
	// idle is the hook and this process with no sync, after the first
	// syncs.
	idle idleUsage
	// measured: the healthy clusters' phase is done; the report can be
	// written.
	measured bool
	alone    phaseResult
	// mixed is with the unreachable clusters (none: nil), kept the phase
	// whose endpoints fit the kept connections, replicas the phase of
	// several hooks (none: nil).
	mixed, kept, replicas *phaseResult
	floors                []syncFloor
}

// render is the report: the targets, then the tables they come from.
func (fr *fleetResult) render() string {
	var b strings.Builder
	s := fr.shape
	fmt.Fprintf(&b, "Shape: %s. Hook binary: %s, default flags (%d etcd connections kept, --max-idle-etcd-conns). "+
		"Fleet issued in %s, first syncs in %s, whole run %s.\n\n",
		s, hookBinaryNote(), etcdclient.DefaultMaxIdleConns, fr.setup.Round(time.Second), fr.warmWall.Round(time.Second), fr.wall.Round(time.Second))
	b.WriteString(fr.targets())
	b.WriteString("\n" + fr.phases())
	b.WriteString("\n" + fr.machine())
	b.WriteString("\n" + fr.calls())
	if fr.replicas != nil {
		b.WriteString("\n" + fr.replicaTable())
	}
	b.WriteString("\n" + fr.sizing())
	b.WriteString("\n" + fr.nextTenfold())
	return b.String()
}

func hookBinaryNote() string {
	path, err := testenv.FromModuleRoot("bin/etcd-hook")
	if err != nil {
		return "bin/etcd-hook"
	}
	if st, err := os.Stat(path); err == nil {
		return fmt.Sprintf("bin/etcd-hook built %s", st.ModTime().UTC().Format("2006-01-02 15:04 MST"))
	}
	return "bin/etcd-hook"
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// singleHookPhases are the phases of one hook process, in order.
func (fr *fleetResult) singleHookPhases() []namedPhase {
	out := []namedPhase{{"healthy clusters alone", &fr.alone}}
	if fr.mixed != nil {
		out = append(out, namedPhase{fmt.Sprintf("%d unreachable interleaved", fr.shape.unreachable), fr.mixed})
	}
	if fr.kept != nil {
		out = append(out, namedPhase{fmt.Sprintf("connections kept (%d clusters)", fr.kept.clusters()), fr.kept})
	}
	return out
}

func (fr *fleetResult) allPhases() []namedPhase {
	out := fr.singleHookPhases()
	if fr.replicas != nil {
		out = append(out, namedPhase{fmt.Sprintf("%d replicas", fr.shape.replicas), fr.replicas})
	}
	return out
}

type namedPhase struct {
	name string
	p    *phaseResult
}

func (fr *fleetResult) targets() string {
	lines := []string{
		"| target (the issue's, for 10,000 clusters) | measured | met |",
		"|---|---|---|",
	}
	// Memory: the peak of the one hook over its phases.
	var peak int64
	var rss []string
	for _, np := range fr.singleHookPhases() {
		peak = max(peak, np.p.hooks[0].proc.peakRSS)
		rss = append(rss, fmt.Sprintf("%s %s", np.name, mib(float64(np.p.hooks[0].proc.rss))))
	}
	lines = append(lines, fmt.Sprintf("| hook RSS ≤ %s (one hook, every phase) | peak %s (VmHWM); at the end of each phase: %s; just started: %s | %s |",
		mib(targetRSS), mib(float64(peak)), strings.Join(rss, ", "), mib(float64(fr.startRSS.rss)), met(peak <= targetRSS)))

	a := &fr.alone
	p99s := []string{fmt.Sprintf("all healthy %s", ms(pct(a.healthy(), 99)))}
	ok := pct(a.healthy(), 99) <= targetP99
	for _, k := range a.kinds() {
		p99s = append(p99s, fmt.Sprintf("%s %s", k.name, ms(pct(k.syncs, 99))))
		ok = ok && pct(k.syncs, 99) <= targetP99
	}
	lines = append(lines, fmt.Sprintf("| healthy sync p99 ≤ %s, due to done (healthy clusters alone) | %s; p50 %s | %s |",
		ms(targetP99), strings.Join(p99s, ", "), ms(pct(a.healthy(), 50)), met(ok)))

	if m := fr.mixed; m != nil {
		worst := 0.0
		var ratios []string
		for _, k := range []struct {
			name         string
			alone, mixed []time.Duration
		}{{"all healthy", a.healthy(), m.healthy()}, {"plain", a.plain, m.plain}, {"TLS", a.tls, m.tls}} {
			if len(k.alone) == 0 || len(k.mixed) == 0 {
				continue
			}
			r := ratio(pct(k.mixed, 99), pct(k.alone, 99))
			worst = max(worst, r)
			ratios = append(ratios, fmt.Sprintf("%s %.2f (%s against %s)", k.name, r, ms(pct(k.mixed, 99)), ms(pct(k.alone, 99))))
		}
		lines = append(lines, fmt.Sprintf("| %d unreachable clusters move no healthy p99 by more than %.0f%% | p99 interleaved / alone: %s | %s |",
			fr.shape.unreachable, 100*(targetUnreachableRatio-1), strings.Join(ratios, "; "), met(worst <= targetUnreachableRatio)))
	} else {
		lines = append(lines, "| unreachable clusters move no healthy p99 by more than 10% | not measured: BENCH_SCALE_UNREACHABLE=0 | - |")
	}

	cpu := a.cpuPerSync()
	extra := fmt.Sprintf("; of which the hook's idle upkeep at this rate %s", ms(fr.idlePerSync(a)))
	if fr.kept != nil {
		extra += fmt.Sprintf("; with every connection kept %s", ms(fr.kept.cpuPerSync()))
	}
	if f := fr.floorMix(); f != nil {
		extra += fmt.Sprintf("; decode, plan and encode alone, no network, %s", ms(f.sync))
	}
	lines = append(lines, fmt.Sprintf("| hook CPU ≤ %s per healthy sync | %s (healthy clusters alone, %.2f dials per sync)%s | %s |",
		ms(targetCPU), ms(cpu), a.dialsPerSync(), extra, met(cpu <= targetCPU)))

	if r := fr.replicas; r != nil {
		n := len(r.hooks)
		var shares, ratios []string
		split, half := true, true
		one := fr.sameTargetsAs(r)
		for i, h := range r.hooks {
			share := float64(h.syncs) / float64(r.syncs())
			split = split && abs(share-1/float64(n)) <= targetShareSlack
			shares = append(shares, fmt.Sprintf("%d: %.1f%%", i+1, 100*share))
			q := float64(h.proc.rss) / float64(one.hooks[0].proc.rss)
			half = half && q <= targetReplicaRSS
			ratios = append(ratios, fmt.Sprintf("%d: %s, %.2f×", i+1, mib(float64(h.proc.rss)), q))
		}
		lines = append(lines,
			fmt.Sprintf("| %d replicas: the load splits (each within %.0f points of an even share; requests sent at random, see below) | share of requests: %s; hook CPU per sync %s | %s |",
				n, 100*targetShareSlack, strings.Join(shares, ", "), r.replicaCPUs(), met(split)),
			fmt.Sprintf("| %d replicas: each replica's memory roughly half of one hook's (≤ %.1f×) | RSS, and against one hook's %s (same clusters): %s | %s |",
				n, targetReplicaRSS, mib(float64(one.hooks[0].proc.rss)), strings.Join(ratios, "; "), met(half)))
	}

	var failed []string
	for _, np := range fr.allPhases() {
		if np.p.failed > 0 {
			failed = append(failed, fmt.Sprintf("%s: %d of %d (first: %.200s)", np.name, np.p.failed, np.p.syncs(), strings.ReplaceAll(np.p.firstFailures, "\n", " ")))
		}
	}
	if len(failed) > 0 {
		lines = append(lines, fmt.Sprintf("| every sync answered, steady | failed syncs: %s | **no** |", strings.Join(failed, "; ")))
	}
	limit, why := fr.benchLimit()
	lines = append(lines, fmt.Sprintf("| the bench's own side (etcd sims for %d member endpoints, DNS, the client playing Metacontroller) is not the limit | %s | %s |",
		fr.shape.clusters*scaleMembers, why, met(!limit)))
	return strings.Join(lines, "\n") + "\n"
}

// sameTargetsAs is the one-hook phase that synced the same targets as p.
func (fr *fleetResult) sameTargetsAs(p *phaseResult) *phaseResult {
	if fr.mixed != nil && len(p.unreachable) > 0 {
		return fr.mixed
	}
	return &fr.alone
}

// benchLimit tells whether the test process, or the machine, rather than
// the hook, set any phase's figures, and why.
func (fr *fleetResult) benchLimit() (bool, string) {
	var saturated, late, heavier, others []string
	busiest := 0.0
	for _, np := range fr.allPhases() {
		p := np.p
		busiest = max(busiest, p.busy())
		if o := p.othersCores(); o >= quietOthers {
			others = append(others, fmt.Sprintf("%s (%.2f cores)", np.name, o))
		}
		if p.busy() >= saturatedBusy {
			saturated = append(saturated, fmt.Sprintf("%s (%.0f%%)", np.name, 100*p.busy()))
		}
		if !p.keptUp() {
			late = append(late, fmt.Sprintf("%s (the last syncs waited %s for a worker; %.1f done of %.1f due per second)", np.name, ms(p.endWait()), p.rate(), p.due))
		}
		if p.testCPU > p.hookCPU() {
			heavier = append(heavier, fmt.Sprintf("%s (%.2f against %.2f cores)", np.name, cores(p.testCPU, p.wall), cores(p.hookCPU(), p.wall)))
		}
	}
	var why []string
	if len(others) > 0 {
		why = append(why, "other processes used CPU in "+strings.Join(others, ", ")+": not a quiet run")
	}
	if len(saturated) > 0 {
		why = append(why, "every core busy in "+strings.Join(saturated, ", ")+": latencies include waiting for a core")
	}
	if len(late) > 0 {
		why = append(why, "syncs done slower than they fell due in "+strings.Join(late, ", "))
	}
	if len(heavier) > 0 {
		why = append(why, "the test process used more CPU than the hook in "+strings.Join(heavier, ", "))
	}
	if len(saturated) == 0 && len(late) == 0 && len(heavier) == 0 {
		why = append([]string{fmt.Sprintf("the machine at most %.0f%% busy, every phase kept up with its rate, the test process under the hook's CPU in each (table below)", 100*busiest)}, why...)
		return false, strings.Join(why, "; ")
	}
	return len(saturated) > 0 || len(late) > 0, strings.Join(why, "; ")
}

func (fr *fleetResult) phases() string {
	lines := []string{
		"| phase (one hook) | syncs of (due to done) | count | p50 | p99 | max | syncs/s (due) | hook CPU per sync | dials per sync | hook RSS | peak RSS | threads | goroutines | heap in use | next GC at |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
	}
	for _, np := range fr.allPhases() {
		p := np.p
		first := true
		row := func(label string, syncs []time.Duration, dials string) {
			if len(syncs) == 0 {
				return
			}
			r := fmt.Sprintf("| %s | %s | %d | %s | %s | %s |", np.name, label, len(syncs), us(pct(syncs, 50)), us(pct(syncs, 99)), us(pct(syncs, 100)))
			if first && len(p.hooks) == 1 {
				h := p.hooks[0]
				r += fmt.Sprintf(" %.1f (%.1f) | %s | %s | %s | %s | %d | %s | %s | %s |",
					p.rate(), p.due, us(p.cpuPerSync()), dials, mib(float64(h.proc.rss)), mib(float64(h.proc.peakRSS)), h.proc.threads,
					metric(h.metrics, metricGoroutines, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
					metric(h.metrics, metricHeapInUse, mib), metric(h.metrics, metricNextGC, mib))
			} else if first {
				r += fmt.Sprintf(" %.1f (%.1f) | %s | %s | (by replica, below) | | | | | |", p.rate(), p.due, us(p.cpuPerSync()), dials)
			} else {
				r += fmt.Sprintf(" | | %s | | | | | | |", dials)
			}
			first = false
			lines = append(lines, r)
		}
		row("healthy clusters", p.healthy(), fmt.Sprintf("%.2f", p.dialsPerSync()))
		row("plain clusters", p.plain, fmt.Sprintf("%.2f", perSync(p.calls.conns, len(p.plain))))
		row("TLS clusters", p.tls, fmt.Sprintf("%.2f", perSync(p.tlsCalls.conns, len(p.tls))))
		row("unreachable clusters", p.unreachable, "")
		if len(p.unreachable) > 0 {
			lines = append(lines, fmt.Sprintf("| %s | worker time on unreachable clusters | | | | | %s | | | | | | | | |", np.name, p.workerShare(p.unreachable, fr.shape.workers)))
		}
	}
	if m := fr.mixed; m != nil {
		a := &fr.alone
		lines = append(lines, fmt.Sprintf("| ratio, interleaved / alone | healthy clusters | | %.2f | %.2f | %.2f | %.2f | %.2f | | | | | | | |",
			ratio(pct(m.healthy(), 50), pct(a.healthy(), 50)), ratio(pct(m.healthy(), 99), pct(a.healthy(), 99)),
			ratio(pct(m.healthy(), 100), pct(a.healthy(), 100)), m.rate()/a.rate(), ratio(m.cpuPerSync(), a.cpuPerSync())))
	}
	return strings.Join(lines, "\n") + "\n" +
		"\nDials per sync are the connections the etcd sims accepted (for TLS, handshakes) per healthy sync of that kind. " +
		"Hook CPU per sync is the hook process's user and system time over the phase (/proc/<pid>/stat) divided by every sync it answered, unreachable ones included.\n"
}

func (fr *fleetResult) machine() string {
	lines := []string{
		"| phase | wall | hook CPU (cores) | test process CPU (cores): etcd sims, DNS, client | other processes (cores) | machine busy | test CPU per sync | DNS queries per sync | test process RSS | kept up with the rate due (wait for a worker: p99, at the end) |",
		"|---|---|---|---|---|---|---|---|---|---|",
	}
	if fr.idle.wall > 0 {
		lines = append(lines, fmt.Sprintf("| idle: no sync, after the first syncs | %s | %.3f | %.3f | | | | | | |",
			fr.idle.wall.Round(100*time.Millisecond), cores(fr.idle.hook, fr.idle.wall), cores(fr.idle.test, fr.idle.wall)))
	}
	for _, np := range fr.allPhases() {
		p := np.p
		lines = append(lines, fmt.Sprintf("| %s | %s | %.2f | %.2f | %.2f | %.0f%% of %d cores | %s | %.1f | %s | %s |",
			np.name, p.wall.Round(100*time.Millisecond), cores(p.hookCPU(), p.wall), cores(p.testCPU, p.wall), p.othersCores(),
			100*p.busy(), runtime.NumCPU(), us(p.testCPU/time.Duration(p.syncs())), float64(p.dnsQueries)/float64(p.syncs()),
			mib(float64(p.test.rss)), fmt.Sprintf("%s (%s, %s)", met(p.keptUp()), ms(pct(p.waits, 99)), ms(p.endWait()))))
	}
	limit, why := fr.benchLimit()
	verdict := "**The bench's side was not the limit**: " + why + "."
	if limit {
		verdict = "**On this machine the bench's side, or the machine, is the limit**: " + why + ". " +
			"The etcd sims answer every member of the fleet in this process, and for TLS clusters make the server side of every handshake the hook's dials cause, " +
			"on the same cores as the hook: these latencies are upper bounds of the hook's, and its CPU per sync is its own either way (counted from /proc)."
	}
	for _, w := range []struct {
		what string
		p    *problems
		n    int
	}{{"first syncs of the one hook, every cluster at once", fr.warmRetried, len(fr.fleet)},
		{fmt.Sprintf("first syncs of each of the %d replicas", fr.shape.replicas), fr.replicaWarmRetried, len(fr.fleet) * fr.shape.replicas}} {
		if w.p == nil {
			continue
		}
		if err := w.p.err(); err != nil {
			verdict += fmt.Sprintf("\n\nBefore the phases, %d of the %d %s (%d workers, as fast as they go) got no steady answer and were made again (at most %d attempts): "+
				"on new connections every member is dialed, and a dial the busy machine does not finish within the hook's 0.5 s for a connection reports the member unreachable. The first: %.300s",
				w.p.count(), w.n, w.what, fr.shape.workers, warmAttempts, w.p.firstOne())
		}
	}
	return strings.Join(lines, "\n") + "\n\n" + verdict + "\n"
}

func (fr *fleetResult) calls() string {
	lines := []string{
		"| etcd calls per healthy sync | Status | MemberList (linearizable) | MemberList (serializable) | connections accepted (TLS: handshakes) | unexpected calls |",
		"|---|---|---|---|---|---|",
	}
	nPlain, nTLS := fr.healthyCounts()
	if nPlain > 0 {
		lines = append(lines, callsRow("first sync, plain clusters", fr.warm.plain, nPlain))
	}
	if nTLS > 0 {
		lines = append(lines, callsRow("first sync, TLS clusters", fr.warm.tls, nTLS))
	}
	for _, np := range fr.allPhases() {
		if len(np.p.plain) > 0 {
			lines = append(lines, callsRow(np.name+", plain clusters", np.p.calls, len(np.p.plain)))
		}
		if len(np.p.tls) > 0 {
			lines = append(lines, callsRow(np.name+", TLS clusters", np.p.tlsCalls, len(np.p.tls)))
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

func (fr *fleetResult) healthyCounts() (plain, tls int) {
	for _, c := range fr.fleet {
		switch {
		case c.unreachable:
		case c.tls != nil:
			tls++
		default:
			plain++
		}
	}
	return plain, tls
}

func (fr *fleetResult) replicaTable() string {
	r := fr.replicas
	one := fr.sameTargetsAs(r)
	lines := []string{
		"| hook | share of requests | share of syncs answered (owned and received, since start) | requests | requests/s | hook CPU per request | RSS | peak RSS | RSS / one hook's | threads | goroutines | heap in use | next GC at |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|",
	}
	var answered float64
	for _, h := range r.hooks {
		answered += h.metrics[metricOwned] + h.metrics[metricReceived]
	}
	hookRow := func(label string, h hookUsage, wall time.Duration, share string, rssRatio string) string {
		answeredHere := "100%"
		if share != "100%" {
			answeredHere = fmt.Sprintf("%.1f%%", 100*(h.metrics[metricOwned]+h.metrics[metricReceived])/max(1, answered))
		}
		return fmt.Sprintf("| %s | %s | %s | %d | %.1f | %s | %s | %s | %s | %d | %s | %s | %s |",
			label, share, answeredHere, h.syncs, float64(h.syncs)/wall.Seconds(), us(h.cpuPerSync()), mib(float64(h.proc.rss)), mib(float64(h.proc.peakRSS)), rssRatio, h.proc.threads,
			metric(h.metrics, metricGoroutines, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			metric(h.metrics, metricHeapInUse, mib), metric(h.metrics, metricNextGC, mib))
	}
	lines = append(lines, hookRow("one hook, same clusters", one.hooks[0], one.wall, "100%", "1.00"))
	for i, h := range r.hooks {
		lines = append(lines, hookRow(fmt.Sprintf("replica %d of %d", i+1, len(r.hooks)), h, r.wall,
			fmt.Sprintf("%.1f%%", 100*float64(h.syncs)/float64(r.syncs())), fmt.Sprintf("%.2f", float64(h.proc.rss)/float64(one.hooks[0].proc.rss))))
	}
	lat := []string{
		"",
		"| syncs of (due to done) | one hook p50 | p99 | replicas p50 | p99 | p99 ratio |",
		"|---|---|---|---|---|---|",
	}
	for _, k := range []struct {
		name     string
		one, rep []time.Duration
	}{{"healthy clusters", one.healthy(), r.healthy()}, {"plain clusters", one.plain, r.plain}, {"TLS clusters", one.tls, r.tls}} {
		if len(k.one) == 0 || len(k.rep) == 0 {
			continue
		}
		lat = append(lat, fmt.Sprintf("| %s | %s | %s | %s | %s | %.2f |", k.name, us(pct(k.one, 50)), us(pct(k.one, 99)), us(pct(k.rep, 50)), us(pct(k.rep, 99)), ratio(pct(k.rep, 99), pct(k.one, 99))))
	}
	if fr.shape.noPeers {
		note := fmt.Sprintf("\nThe %d replicas serve the same fleet without --peers (BENCH_SCALE_PEERS=0): each syncs whatever reaches it. "+
			"Each first got every cluster's request once, and in the phase each request went to one replica picked at random, "+
			"so each keeps its own %d connections and its memos and series of every cluster.\n", len(r.hooks), etcdclient.DefaultMaxIdleConns)
		return strings.Join(lines, "\n") + "\n" + strings.Join(lat, "\n") + "\n" + note
	}
	note := fmt.Sprintf("\nThe %d replicas serve the same fleet with --peers (each listing both, as the chart's headless Service does): "+
		"each parent is answered by the replica that owns it, and a request that reaches the other is forwarded to it. "+
		"Each replica first got every cluster's request once, as Metacontroller's workers send any cluster over any connection, and in the phase each request went to one replica picked at random. "+
		"That is the even, per-request split the issue assumes. Behind a Service the split is per connection: kube-proxy picks a replica when a connection opens, "+
		"and Metacontroller posts over Go's default HTTP transport, which keeps at most 2 idle connections per host; so the requests each replica receives can be far from half for as long as those connections live. "+
		"The syncs each answers are not: they follow ownership, whichever replica a request reaches. "+
		"So each replica keeps its own %d connections, memos and series for its share of the fleet only; a request's CPU covers the forwarding of the half that reached the other replica.\n",
		len(r.hooks), etcdclient.DefaultMaxIdleConns)
	return strings.Join(lines, "\n") + "\n" + strings.Join(lat, "\n") + "\n" + note
}

// tlsScaleReport renders the second hook's tables: a fleet with TLS
// clusters among the plain ones, against the first hook's healthy phase
// (BENCH_SCALE_COMPARE_TLS_EVERY; the 1000-cluster run's "hook 2").
func tlsScaleReport(shape scaleShape, fleet []fleetCluster, first phaseResult, warm fleetCounts, p phaseResult) string {
	var nPlain, nTLS int
	for _, c := range fleet {
		if c.tls != nil {
			nTLS++
		} else {
			nPlain++
		}
	}
	firstLabel := fmt.Sprintf("1: %d clusters (%d unreachable", shape.clusters, shape.unreachable)
	if shape.tlsEvery > 0 {
		firstLabel += ", " + everyNth(shape.tlsEvery) + " TLS"
	}
	firstLabel += ")"
	second := fmt.Sprintf("2: %d plain, %d TLS", nPlain, nTLS)
	lines := []string{
		"| hook | syncs of (due to done) | count | p50 | p99 | max | syncs/s | hook CPU per sync | hook RSS | peak RSS | threads | goroutines | heap in use | next GC at |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
		hookRow(firstLabel, "healthy clusters, alone", first.healthy(), &first),
	}
	// The process's columns go on hook 2's first row.
	proc := &p
	for _, k := range []struct {
		label string
		syncs []time.Duration
	}{{"plain clusters", p.plain}, {"TLS clusters", p.tls}} {
		if len(k.syncs) > 0 {
			lines = append(lines, hookRow(second, k.label, k.syncs, proc))
			proc = nil
		}
	}
	if len(p.plain) > 0 && len(p.tls) > 0 {
		lines = append(lines, fmt.Sprintf("| ratio in hook 2, TLS / plain clusters | | | %.2f | %.2f | %.2f | | | | | | | | |",
			ratio(pct(p.tls, 50), pct(p.plain, 50)), ratio(pct(p.tls, 99), pct(p.plain, 99)), ratio(pct(p.tls, 100), pct(p.plain, 100))))
	}
	h1, h2 := first.hooks[0], p.hooks[0]
	lines = append(lines,
		fmt.Sprintf("| ratio, hook 2 / hook 1 | | | | | | %.2f | %.2f | %.2f | %.2f | | %s | %s | %s |",
			p.rate()/first.rate(), ratio(p.cpuPerSync(), first.cpuPerSync()),
			float64(h2.proc.rss)/float64(h1.proc.rss), float64(h2.proc.peakRSS)/float64(h1.proc.peakRSS),
			metricRatio(h2.metrics, h1.metrics, metricGoroutines), metricRatio(h2.metrics, h1.metrics, metricHeapInUse),
			metricRatio(h2.metrics, h1.metrics, metricNextGC)),
		"",
		"| etcd calls per sync, hook 2 | Status | MemberList (linearizable) | MemberList (serializable) | connections accepted (TLS: handshakes) | unexpected calls |",
		"|---|---|---|---|---|---|",
	)
	if nPlain > 0 {
		lines = append(lines, callsRow("first sync, plain clusters", warm.plain, nPlain), callsRow("plain clusters", p.calls, len(p.plain)))
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
	h := p.hooks[0]
	return row + fmt.Sprintf(" %.0f | %s | %s | %s | %d | %s | %s | %s |",
		p.rate(), us(p.cpuPerSync()), mib(float64(h.proc.rss)), mib(float64(h.proc.peakRSS)), h.proc.threads,
		metric(h.metrics, metricGoroutines, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		metric(h.metrics, metricHeapInUse, mib), metric(h.metrics, metricNextGC, mib))
}
