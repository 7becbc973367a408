package bench

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/plan"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

const (
	scaleClusters = 1000
	// Metacontroller's default number of workers: at most this many syncs
	// are in flight at once.
	scaleWorkers = 5
	// Metacontroller's default hook timeout, which this run's client keeps.
	hookTimeout = 10 * time.Second
)

// Where the unreachable clusters sit in the round-robin, spread out.
var unreachableAt = []int{100, 300, 500, 700, 900}

// TestScaleReport measures one hook process serving 1000 clusters, due
// round-robin at a steady rate and synced by Metacontroller's 5 workers:
// the hook's memory, and the healthy clusters' latency from due to done,
// without and then with 5 clusters whose etcd never answers, in the same
// run. Then a second hook process serves 1000 clusters of which every
// BENCH_SCALE_TLS_EVERY-th (default 2: half) has spec.TLS, their members
// serving TLS with client certificate auth: its memory, and the plain
// and the TLS clusters' latency, interleaved. The healthy clusters' etcd
// is etcdSim. Run with BENCH_REPORT=1 (make bench-scale).
func TestScaleReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench-scale) to measure")
	}
	harness.Require(t)
	rounds := max(1, envInt("BENCH_SCALE_ROUNDS", 2))
	// Three times what 1000 clusters resynced every minute ask, and well
	// under what the workers can do: the latency is the hook's, not a
	// queue that grows without end.
	rate := float64(envInt("BENCH_SCALE_RATE", 50))
	tlsEvery := envInt("BENCH_SCALE_TLS_EVERY", 2)

	var report string
	var plainAlone phaseResult
	t.Run("plain", func(t *testing.T) {
		fleet, err := newFleet(scaleClusters, unreachableAt, 0)
		if err != nil {
			t.Fatal(err)
		}
		r := startScaleRun(t, fleet)
		warm, healthy, all := r.warmUp(t)
		plainAlone = r.phase(t, healthy, rounds, rate)
		mixed := r.phase(t, all, rounds, rate)
		report = scaleReport(warm.plain, len(healthy), plainAlone, mixed)
	})
	if t.Failed() {
		return
	}
	t.Run("tls", func(t *testing.T) {
		fleet, err := newFleet(scaleClusters, nil, tlsEvery)
		if err != nil {
			t.Fatal(err)
		}
		r := startScaleRun(t, fleet)
		warm, healthy, _ := r.warmUp(t)
		phase := r.phase(t, healthy, rounds, rate)
		report += "\n" + tlsScaleReport(fleet, plainAlone, warm, phase)
	})

	t.Logf("%d clusters of 3 members, %d workers, %.0f syncs due per second, %d rounds per phase, %d cores; "+
		"first hook: %d of them unreachable; second hook: every %d-th with spec.TLS:\n%s",
		scaleClusters, scaleWorkers, rate, rounds, runtime.NumCPU(), len(unreachableAt), tlsEvery, report)
	if path := os.Getenv("BENCH_SCALE_FILE"); path != "" {
		if err := writeFromModuleRoot(path, report); err != nil {
			t.Fatal(err)
		}
	}
}

// writeFromModuleRoot writes a file whose relative path is taken from the
// module root, as make passes it: go test runs in the package directory.
func writeFromModuleRoot(path, content string) error {
	path, err := testenv.FromModuleRoot(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// scaleRun is the hook process, the etcd it reaches (the plain clusters'
// and the TLS clusters') and the client that plays Metacontroller.
type scaleRun struct {
	fleet       []fleetCluster
	hook        *harness.HookProcess
	sim, simTLS *etcdSim
	client      *http.Client
}

func startScaleRun(t *testing.T, fleet []fleetCluster) *scaleRun {
	bin := testenv.Binary(t, testenv.Hook)

	simListener, err := listenLoopback(plan.ClientPort)
	if err != nil {
		t.Fatal(err)
	}
	tlsListener, err := listenLoopback(plan.ClientPort)
	if err != nil {
		t.Fatal(err)
	}
	sim, simTLS := newEtcdSim(), newEtcdSim()
	for _, c := range fleet {
		switch {
		case c.unreachable:
		case c.tls != nil:
			simTLS.addCluster(c)
		default:
			sim.addCluster(c)
		}
	}
	sim.serve(simListener)
	t.Cleanup(sim.stop)
	simTLS.serveTLS(tlsListener)
	t.Cleanup(simTLS.stop)
	holeListener, err := listenLoopback(plan.ClientPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serveBlackhole(holeListener))
	resolve, err := fleetDNS(fleet, listenerIP(simListener), listenerIP(tlsListener), listenerIP(holeListener))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(harness.SandboxDNS().AddSource(resolve))

	procs := harness.NewProcTable()
	t.Cleanup(func() { procs.StopAll(5 * time.Second) })
	logPath := filepath.Join(t.TempDir(), "hook.log")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hook log, last lines:\n%s", tail(logPath, 30))
		}
	})
	hook, err := harness.NewHookProcess(procs, bin, logPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := hook.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &scaleRun{
		fleet:  fleet,
		hook:   hook,
		sim:    sim,
		simTLS: simTLS,
		client: &http.Client{Timeout: hookTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: scaleWorkers}},
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
