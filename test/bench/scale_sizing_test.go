package bench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// Sizing: what a sync costs without the network, and what limits the
// next tenfold.

// floorMix is the floors weighted by the fleet's plain and TLS healthy
// clusters, or nil.
func (fr *fleetResult) floorMix() *syncFloor {
	if len(fr.floors) == 0 {
		return nil
	}
	nPlain, nTLS := fr.healthyCounts()
	var out syncFloor
	var total float64
	for _, f := range fr.floors {
		w := float64(nPlain)
		if f.kind == "TLS" {
			w = float64(nTLS)
		}
		total += w
		out.request += int(w * float64(f.request))
		out.full += int(w * float64(f.full))
		out.answer += int(w * float64(f.answer))
		out.decode += time.Duration(w * float64(f.decode))
		out.sync += time.Duration(w * float64(f.sync))
		out.fullDecode += time.Duration(w * float64(f.fullDecode))
		out.fullSync += time.Duration(w * float64(f.fullSync))
		out.syncAlloc += w * f.syncAlloc
		out.fullSyncAlloc += w * f.fullSyncAlloc
	}
	out.syncAlloc, out.fullSyncAlloc = out.syncAlloc/total, out.fullSyncAlloc/total
	div := func(d time.Duration) time.Duration { return time.Duration(float64(d) / total) }
	out.kind = "fleet mix"
	out.request, out.full, out.answer = int(float64(out.request)/total), int(float64(out.full)/total), int(float64(out.answer)/total)
	out.decode, out.sync, out.fullDecode, out.fullSync = div(out.decode), div(out.sync), div(out.fullDecode), div(out.fullSync)
	return &out
}

func (fr *fleetResult) sizing() string {
	floors := slices.Clone(fr.floors)
	if f := fr.floorMix(); f != nil && len(floors) > 1 {
		floors = append(floors, *f)
	}
	header := "| per sync |"
	sep := "|---|"
	for _, f := range floors {
		header += " " + f.kind + " |"
		sep += "---|"
	}
	lines := []string{header, sep}
	row := func(label string, cell func(f syncFloor) string) {
		r := "| " + label + " |"
		for _, f := range floors {
			r += " " + cell(f) + " |"
		}
		lines = append(lines, r)
	}
	row("request, as this fleet sends it (bytes)", func(f syncFloor) string { return strconv.Itoa(f.request) })
	row("request of a steady cluster with its Services, budget and NetworkPolicies as the API server serves them (bytes)", func(f syncFloor) string { return strconv.Itoa(f.full) })
	row("answer (bytes)", func(f syncFloor) string { return strconv.Itoa(f.answer) })
	row("JSON decoding (hooks.Decode), CPU, the collector aside: this fleet's request / the full one", func(f syncFloor) string { return us(f.decode) + " / " + us(f.fullDecode) })
	row("decode, plan and encode, no network (in this process), CPU, the collector aside: this fleet's request / the full one", func(f syncFloor) string { return us(f.sync) + " / " + us(f.fullSync) })
	row("allocated by decode, plan and encode (KiB), which the collector pays for: this fleet's request / the full one", func(f syncFloor) string {
		return fmt.Sprintf("%.0f / %.0f", f.syncAlloc/1024, f.fullSyncAlloc/1024)
	})
	out := strings.Join(lines, "\n") + "\n"

	a := &fr.alone
	endpoints := fr.shape.clusters * scaleMembers
	var sb strings.Builder
	sb.WriteString("\n| per healthy sync, the hook process | CPU | dials |\n|---|---|---|\n")
	if fr.kept != nil {
		fmt.Fprintf(&sb, "| connections kept (%d clusters, %d endpoints, under the %d kept) | %s | %.2f |\n",
			fr.kept.clusters(), fr.kept.clusters()*scaleMembers, etcdclient.DefaultMaxIdleConns, us(fr.kept.cpuPerSync()), fr.kept.dialsPerSync())
	}
	fmt.Fprintf(&sb, "| the whole fleet (%d endpoints for %d kept connections: %.0f× as many) | %s | %.2f |\n",
		endpoints, etcdclient.DefaultMaxIdleConns, float64(endpoints)/float64(etcdclient.DefaultMaxIdleConns), us(a.cpuPerSync()), a.dialsPerSync())
	fmt.Fprintf(&sb, "| of it, the hook's idle upkeep (%.3f cores with no sync) at %.1f syncs/s | %s | |\n",
		cores(fr.idle.hook, fr.idle.wall), a.rate(), us(fr.idlePerSync(a)))
	if fr.kept != nil {
		fmt.Fprintf(&sb, "| the dials' part (the whole fleet less connections kept) | %s | |\n", us(a.cpuPerSync()-fr.kept.cpuPerSync()))
	}
	sb.WriteString("\nThe in-process rows replay one real read of the cluster's etcd sim, so they are the hook's own work for a sync without HTTP or gRPC, " +
		"measured with the collector off (the least of 5 windows): the test process's heap is not the hook's; the hook's rows below include its collector. " +
		"The fleet's requests carry the member Pods and the status, not the Services, budget and NetworkPolicies a steady cluster has, " +
		"so the hook decodes less than it would from Metacontroller (second row).\n")
	return out + sb.String()
}

// nextTenfold is the paragraph on what limits ten times this fleet,
// computed from the figures above.
func (fr *fleetResult) nextTenfold() string {
	s := fr.shape
	a := &fr.alone
	rate10 := 10 * s.rate
	n := runtime.NumCPU()
	var items, limits []string

	dial := a.cpuPerSync()
	hookCores := cores10(dial, rate10)
	items = append(items, fmt.Sprintf("**CPU.** At %d clusters (%.0f syncs/s) one hook at today's %s per sync needs %.1f cores (%.1f for each of 2 replicas; this machine has %d).",
		10*s.clusters, rate10, ms(dial), hookCores, hookCores/2, n))
	if hookCores > float64(n) {
		limits = append(limits, fmt.Sprintf("hook CPU (%.1f cores)", hookCores))
	}
	if k := fr.kept; k != nil {
		d := dial - k.cpuPerSync()
		items = append(items, fmt.Sprintf("Dialing is %s of it (%.0f%%): %.1f cores; with every connection kept a sync costs %s, %.1f cores.",
			ms(d), 100*float64(d)/float64(dial), cores10(d, rate10), ms(k.cpuPerSync()), cores10(k.cpuPerSync(), rate10)))
	}
	if f := fr.floorMix(); f != nil {
		items = append(items, fmt.Sprintf("Without any network, and the collector aside, decode, plan and encode take %s per sync (%s from a full steady request): %.1f cores (%.1f); JSON decoding alone %s (%s): %.1f cores (%.1f). "+
			"A sync allocates %.0f KiB (%.0f): %.0f MiB/s (%.0f) for the collector.",
			ms(f.sync), ms(f.fullSync), cores10(f.sync, rate10), cores10(f.fullSync, rate10),
			ms(f.decode), ms(f.fullDecode), cores10(f.decode, rate10), cores10(f.fullDecode, rate10),
			f.syncAlloc/1024, f.fullSyncAlloc/1024, rate10*f.syncAlloc/(1<<20), rate10*f.fullSyncAlloc/(1<<20)))
	}

	endpoints := s.clusters * scaleMembers
	conn := "at the per-connection heap and stacks `make bench` prints (TestConnectionCostReport, bin/hook-cost.md; not found here)"
	plainKiB, tlsKiB, found := connectionCostFromHookCost()
	if found {
		perConn := plainKiB
		if s.tlsEvery > 0 {
			perConn = plainKiB + (tlsKiB-plainKiB)/float64(s.tlsEvery)
		}
		conn = fmt.Sprintf("at %.1f KiB each (bin/hook-cost.md: %.1f plain, %.1f TLS, weighted by this fleet) %s, against the %s RSS target; at this fleet's size %s",
			perConn, plainKiB, tlsKiB, mib(10*float64(endpoints)*perConn*1024), mib(targetRSS), mib(float64(endpoints)*perConn*1024))
		if float64(endpoints)*perConn*1024 > targetRSS {
			limits = append(limits, "connections kept (every endpoint's would not fit the RSS target, even at this size)")
		}
	}
	items = append(items, fmt.Sprintf("**Connections kept.** The hook keeps %d connections for %d member endpoints (%.0f× as many; %.2f dials per healthy sync measured). "+
		"Keeping every endpoint at ×10 takes %d connections, %s.",
		etcdclient.DefaultMaxIdleConns, endpoints, float64(endpoints)/float64(etcdclient.DefaultMaxIdleConns), a.dialsPerSync(), 10*endpoints, conn))

	if f := fr.floorMix(); f != nil {
		items = append(items, fmt.Sprintf("**The request.** %d bytes as this fleet sends it, %d from a full steady cluster: at ×10 the hook reads %.0f MiB/s of JSON (%.0f), "+
			"%.0f× under the %d MiB body bound per request, which is no limit for 3 members.",
			f.request, f.full, rate10*float64(f.request)/(1<<20), rate10*float64(f.full)/(1<<20), float64(hooks.MaxBodyBytes)/float64(f.full), hooks.MaxBodyBytes>>20))
	}

	svc := mean(a.serviceHealthy)
	inFlight := rate10 * svc.Seconds()
	items = append(items, fmt.Sprintf("**Workers.** A healthy sync takes %s on average from post to answer (%s p99); at %.0f syncs/s that keeps %.1f of Metacontroller's %d workers busy (Little's law), before any unreachable cluster holds one for 0.5 s.",
		ms(svc), ms(pct(a.serviceHealthy, 99)), rate10, inFlight, s.workers))
	if inFlight > 0.7*float64(s.workers) {
		limits = append(limits, fmt.Sprintf("workers (%.1f of %d busy)", inFlight, s.workers))
	}

	end := fr.alone.hooks[0].proc.rss
	if fr.mixed != nil {
		end = max(end, fr.mixed.hooks[0].proc.rss)
	}
	if w := fr.warmMemory; len(w) == 2 && w[1].syncs > w[0].syncs {
		perCluster := float64(w[1].proc.rss-w[0].proc.rss) / float64(w[1].syncs-w[0].syncs)
		heapPer := (w[1].metrics[metricHeapInUse] - w[0].metrics[metricHeapInUse]) / float64(w[1].syncs-w[0].syncs)
		projected := float64(end) + perCluster*float64(9*s.clusters)
		items = append(items, fmt.Sprintf("**Memory.** The hook's RSS was %s just started, %s after the first syncs of %d clusters (its %d connections filled) and %s after all %d: "+
			"%.1f KiB of RSS (%.1f KiB of heap in use) per further cluster, for what the hook keeps per cluster, up to its memos' caps. "+
			"At that slope ×10 clusters take %s, against the %s target (an upper bound where a cap is reached first).",
			mib(float64(fr.startRSS.rss)), mib(float64(w[0].proc.rss)), w[0].syncs, etcdclient.DefaultMaxIdleConns, mib(float64(w[1].proc.rss)), w[1].syncs,
			perCluster/1024, heapPer/1024, mib(projected), mib(targetRSS)))
		if projected > targetRSS {
			limits = append(limits, fmt.Sprintf("memory, if it keeps growing with the clusters (%s)", mib(projected)))
		}
	}

	first := "nothing measured here exceeds its bound at ×10"
	if len(limits) > 0 {
		first = strings.Join(limits, "; ")
	}
	return fmt.Sprintf("**What limits the next ×10** (%d clusters, %.0f syncs/s), from the figures above: %s.\n\n- %s\n",
		10*s.clusters, rate10, first, strings.Join(items, "\n- "))
}

// connectionCostFromHookCost reads what a kept connection costs (heap and
// stacks) from the hook-cost report `make bench` writes, if it is there.
func connectionCostFromHookCost() (plainKiB, tlsKiB float64, ok bool) {
	path, err := testenv.FromModuleRoot("bin/hook-cost.md")
	if err != nil {
		return 0, 0, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	var gotPlain, gotTLS bool
	for line := range strings.Lines(string(b)) {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) < 3 {
			continue
		}
		var heap, stacks float64
		if _, err := fmt.Sscanf(strings.TrimSpace(cells[1]), "%f KiB", &heap); err != nil {
			continue
		}
		if _, err := fmt.Sscanf(strings.TrimSpace(cells[2]), "%f KiB", &stacks); err != nil {
			continue
		}
		switch strings.TrimSpace(cells[0]) {
		case "a connection to a plain member":
			plainKiB, gotPlain = heap+stacks, true
		case "a connection to a TLS member":
			tlsKiB, gotTLS = heap+stacks, true
		}
	}
	return plainKiB, tlsKiB, gotPlain && gotTLS
}
