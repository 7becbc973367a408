package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/plan"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

const (
	// Metacontroller's default hook timeout, which this run's client keeps.
	hookTimeout = 10 * time.Second
	// The members of every fleet cluster.
	scaleMembers = 3
	// Clusters per address of an etcdSim: each address takes the
	// connections of at most this many clusters, so that the hook's
	// closed connections (TIME_WAIT, a minute each) are spread over
	// several destinations' port ranges.
	clustersPerSimAddr = 2000
)

// scaleShape is the scale run's shape, from the environment. The defaults
// are the fleet-scale issue's, which make bench-scale passes; make
// bench-scale-1000 passes the 1000-cluster run of BENCHMARKS.md.
type scaleShape struct {
	clusters int
	// workers are Metacontroller's: at most this many syncs are in flight
	// at once (its default is 5; the issue runs 16).
	workers int
	// unreachable clusters, spread evenly through the round-robin, whose
	// member addresses accept TCP and never answer.
	unreachable int
	// tlsEvery: every tlsEvery-th cluster of the fleet has spec.TLS (0:
	// none).
	tlsEvery int
	// rate is how many syncs fall due per second: clusters/60 is a resync
	// of every cluster each minute.
	rate float64
	// rounds per phase: each healthy cluster is synced this many times.
	rounds int
	// replicas serve the fleet together in the last phase (below 2: no
	// such phase), with --peers unless noPeers (BENCH_SCALE_PEERS=0: each
	// replica syncs whatever reaches it, the hook without --peers).
	replicas int
	noPeers  bool
	// compareTLSEvery > 0 adds, after the fleet's phases, a second hook
	// process serving another fleet of the same size with every
	// compareTLSEvery-th cluster TLS and none unreachable, against the
	// first's healthy phase: the 1000-cluster run's "hook 2".
	compareTLSEvery int
}

func scaleShapeFromEnv() scaleShape {
	s := scaleShape{
		clusters:        envInt("BENCH_SCALE_CLUSTERS", 10000),
		workers:         envInt("BENCH_SCALE_WORKERS", 16),
		unreachable:     envCount("BENCH_SCALE_UNREACHABLE", 20),
		tlsEvery:        envCount("BENCH_SCALE_TLS_EVERY", 2),
		rounds:          envInt("BENCH_SCALE_ROUNDS", 1),
		replicas:        envCount("BENCH_SCALE_REPLICAS", 2),
		compareTLSEvery: envCount("BENCH_SCALE_COMPARE_TLS_EVERY", 0),
		noPeers:         os.Getenv("BENCH_SCALE_PEERS") == "0",
	}
	s.unreachable = min(s.unreachable, s.clusters/2)
	s.rate = envFloat("BENCH_SCALE_RATE", float64(s.clusters)/60)
	return s
}

func (s scaleShape) String() string {
	tls := "no TLS clusters"
	if s.tlsEvery > 0 {
		tls = fmt.Sprintf("%s with spec.TLS (%s)", everyNth(s.tlsEvery), tlsKind())
	}
	replicas := "no replicas phase"
	if s.replicas >= 2 {
		replicas = fmt.Sprintf("%d replicas with --peers in the last phase", s.replicas)
		if s.noPeers {
			replicas = fmt.Sprintf("%d replicas without --peers in the last phase", s.replicas)
		}
	}
	return fmt.Sprintf("%d clusters of %d members (%d member endpoints), %s, %d unreachable; %d workers, %.1f syncs due per second (every cluster every %.0f s), %d round(s) per phase, %s; %d cores",
		s.clusters, scaleMembers, s.clusters*scaleMembers, tls, s.unreachable, s.workers, s.rate, float64(s.clusters)/s.rate, s.rounds, replicas, runtime.NumCPU())
}

// everyNth is "every cluster", "every 2nd cluster", "every 3rd cluster"...
func everyNth(n int) string {
	switch {
	case n == 1:
		return "every cluster"
	case n%10 == 2 && n%100 != 12:
		return fmt.Sprintf("every %dnd cluster", n)
	case n%10 == 3 && n%100 != 13:
		return fmt.Sprintf("every %drd cluster", n)
	}
	return fmt.Sprintf("every %dth cluster", n)
}

func tlsKind() string {
	if os.Getenv("BENCH_SCALE_TLS") == "auto" {
		return "the hook's own certificates, spec.TLS.auto"
	}
	return "the user's Secrets, spec.TLS.static"
}

// envCount is envInt that takes 0 too: a count that may be none.
func envCount(name string, def int) int {
	if v, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name))); err == nil && v >= 0 {
		return v
	}
	return def
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(strings.TrimSpace(os.Getenv(name)), 64); err == nil && v > 0 {
		return v
	}
	return def
}

// TestScaleReport measures the hook binary serving a fleet of 3-member
// clusters, due round-robin at a steady rate and synced by Metacontroller's
// workers, in one test process. Its shape comes from the environment
// (scaleShapeFromEnv; make bench-scale passes the fleet-scale issue's:
// 10,000 clusters, half of them TLS, 20 unreachable, a resync a minute,
// 16 workers). The phases, on one hook process:
//
//   - the first sync of every cluster (warm-up: from an empty status; the
//     steady request carries the status and the Pods the hook answered,
//     which a second sync of the first 20 checks it keeps), then the
//     steady state:
//   - the healthy clusters alone;
//   - every cluster, the unreachable ones interleaved;
//   - a few clusters whose member endpoints fit the connections the hook
//     keeps: the steady sync that dials nothing, for the cost of dials;
//
// then, in this process, the hook's own work for a steady sync without
// the network (decode, plan, encode) and the requests' sizes; then
// BENCH_SCALE_REPLICAS hook processes serving the same fleet, each
// request sent to one at random. The report (BENCH_SCALE_FILE) sets each
// figure against the targets. The healthy clusters' etcd is
// etcdSim. Run with BENCH_REPORT=1 (make bench-scale).
func TestScaleReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench-scale) to measure")
	}
	harness.Require(t)
	shape := scaleShapeFromEnv()
	t.Logf("scale run: %s", shape)

	fr := &fleetResult{shape: shape}
	t.Run("fleet", func(t *testing.T) { runFleet(t, fr) })
	if !fr.measured {
		// A fatal failure before the first phase's end: nothing to report.
		return
	}
	report := fr.render()
	if shape.compareTLSEvery > 0 {
		t.Run("compare-tls", func(t *testing.T) {
			fleet, err := newFleet(shape.clusters, nil, shape.compareTLSEvery)
			if err != nil {
				t.Fatal(err)
			}
			env := startScaleEnv(t, shape, fleet)
			r := env.startHooks(t, 1)
			warm, healthy, _, _, _ := r.warmUp(t, len(fleet))
			phase := r.phase(t, healthy, len(healthy)*shape.rounds, shape.rate)
			report += "\n" + tlsScaleReport(shape, fleet, fr.alone, warm, phase)
		})
	}

	t.Logf("%s:\n%s", shape, report)
	if path := os.Getenv("BENCH_SCALE_FILE"); path != "" {
		if err := writeFromModuleRoot(path, report); err != nil {
			t.Fatal(err)
		}
	}
}

// runFleet runs the fleet's phases of fr.shape, each after the other in
// one test process, and keeps in fr what they measured as they go: a
// phase that fails fatally leaves the earlier ones reported.
func runFleet(t *testing.T, fr *fleetResult) {
	shape := fr.shape
	start := time.Now()
	defer func() { fr.wall = time.Since(start) }()
	fleet, err := newFleet(shape.clusters, spreadPositions(shape.clusters, shape.unreachable, shape.tlsEvery), shape.tlsEvery)
	if err != nil {
		t.Fatal(err)
	}
	env := startScaleEnv(t, shape, fleet)
	fr.fleet, fr.setup = fleet, time.Since(start)
	t.Logf("fleet of %d clusters issued and served in %s", len(fleet), fr.setup.Round(time.Second))

	r := env.startHooks(t, 1)
	fr.startRSS = r.snapshot(t, 0).proc
	warmStart := time.Now()
	var healthy, all []target
	fr.warm, healthy, all, fr.warmMemory, fr.warmRetried = r.warmUp(t, memoryCheckpoint(shape.clusters))
	fr.warmWall = time.Since(warmStart)
	t.Logf("first syncs of %d clusters in %s", len(healthy), fr.warmWall.Round(time.Second))
	fr.idle = r.idle(t, idleTime)

	fr.alone = r.phase(t, healthy, len(healthy)*shape.rounds, shape.rate)
	fr.measured = true
	t.Logf("healthy clusters alone: %s", fr.alone.summary())
	if shape.unreachable > 0 {
		mixed := r.phase(t, all, len(all)*shape.rounds, shape.rate)
		fr.mixed = &mixed
		t.Logf("unreachable ones interleaved: %s", mixed.summary())
	}
	kept := r.keptPhase(t, healthy)
	fr.kept = &kept
	t.Logf("connections kept: %s", kept.summary())
	fr.floors = measureSyncFloors(t, healthy)
	r.stop()

	if shape.replicas >= 2 {
		rs := env.startHooks(t, shape.replicas)
		warmStart := time.Now()
		fr.replicaWarmRetried = rs.warmEach(t, all)
		t.Logf("%d replicas: each synced every cluster once in %s", shape.replicas, time.Since(warmStart).Round(time.Second))
		repl := rs.phase(t, all, len(all)*shape.rounds, shape.rate)
		fr.replicas = &repl
		t.Logf("%d replicas: %s", shape.replicas, repl.summary())
		rs.stop()
	}
}

// idleTime is how long the hook's idle CPU is measured, after the first
// syncs.
const idleTime = 10 * time.Second

// memoryCheckpoint is where warmUp reads the hook's memory the first
// time: a tenth of the fleet, and enough clusters to fill the kept
// connections.
func memoryCheckpoint(clusters int) int {
	return min(clusters, max(clusters/10, 2*etcdclient.DefaultMaxIdleConns/scaleMembers))
}

// writeFromModuleRoot writes a file whose relative path is taken from the
// module root, as make passes it: go test runs in the package directory.
func writeFromModuleRoot(path, content string) error {
	path, err := testenv.FromModuleRoot(path)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// scaleEnv is what a fleet's hooks reach: the etcd of its plain and of
// its TLS clusters, the addresses of the unreachable ones, and the names
// of all of them in the sandbox's DNS. It lives in the test process.
type scaleEnv struct {
	shape       scaleShape
	fleet       []fleetCluster
	sim, simTLS *etcdSim
	dns         *harness.DNSServer
}

func startScaleEnv(t *testing.T, shape scaleShape, fleet []fleetCluster) *scaleEnv {
	sim, simTLS := newEtcdSim(), newEtcdSim()
	var nPlain, nTLS int
	for _, c := range fleet {
		switch {
		case c.unreachable:
		case c.tls != nil:
			simTLS.addCluster(c)
			nTLS++
		default:
			sim.addCluster(c)
			nPlain++
		}
	}
	listen := func(clusters int) ([]net.Listener, []netip.Addr) {
		var ls []net.Listener
		var ips []netip.Addr
		for range max(1, (clusters+clustersPerSimAddr-1)/clustersPerSimAddr) {
			l, err := listenLoopback(plan.ClientPort)
			if err != nil {
				t.Fatal(err)
			}
			ls, ips = append(ls, l), append(ips, listenerIP(l))
		}
		return ls, ips
	}
	plainListeners, plainIPs := listen(nPlain)
	tlsListeners, tlsIPs := listen(nTLS)
	sim.serve(plainListeners...)
	t.Cleanup(sim.stop)
	simTLS.serveTLS(tlsListeners...)
	t.Cleanup(simTLS.stop)
	holeListener, err := listenLoopback(plan.ClientPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serveBlackhole(holeListener))
	resolve, err := fleetDNS(fleet, plainIPs, tlsIPs, listenerIP(holeListener))
	if err != nil {
		t.Fatal(err)
	}
	dns := harness.SandboxDNS()
	t.Cleanup(dns.AddSource(resolve))
	return &scaleEnv{shape: shape, fleet: fleet, sim: sim, simTLS: simTLS, dns: dns}
}

// scaleRun is one or more hook processes serving the environment's fleet,
// and the client that plays Metacontroller: one HTTP client per hook, as
// Metacontroller's connections each reach one replica behind a Service.
type scaleRun struct {
	env     *scaleEnv
	procs   *harness.ProcTable
	hooks   []*harness.HookProcess
	clients []*http.Client
}

// startHooks starts n hook processes, with the hook's default flags; two
// or more are replicas with --peers, each listing all of them.
func (env *scaleEnv) startHooks(t *testing.T, n int) *scaleRun {
	bin := testenv.Binary(t, testenv.Hook)
	r := &scaleRun{env: env, procs: harness.NewProcTable()}
	t.Cleanup(r.stop)
	dir := t.TempDir()
	for i := range n {
		logPath := filepath.Join(dir, fmt.Sprintf("hook-%d.log", i))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("hook %d log, last lines:\n%s", i, tail(logPath, 30))
			}
		})
		hook, err := harness.NewHookProcess(r.procs, bin, logPath, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.hooks = append(r.hooks, hook)
		r.clients = append(r.clients, &http.Client{Timeout: hookTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: env.shape.workers}})
	}
	if n >= 2 && !env.shape.noPeers {
		var peers []string
		for _, h := range r.hooks {
			peers = append(peers, h.Addr())
		}
		for _, h := range r.hooks {
			h.Args = []string{"--peers", strings.Join(peers, ","), "--peer-address", h.Addr()}
		}
	}
	for _, h := range r.hooks {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := h.Start(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// stop ends the hook processes and closes the clients' connections.
func (r *scaleRun) stop() {
	r.procs.StopAll(5 * time.Second)
	for _, c := range r.clients {
		c.CloseIdleConnections()
	}
}

// tail is the last n lines of a log, for a failure message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
