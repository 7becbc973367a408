package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/sync"
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

// TestScaleReport measures one hook process serving 1000 clusters, synced
// round-robin by Metacontroller's 5 workers: the hook's memory, and the
// healthy clusters' latency without and then with 5 clusters whose etcd
// never answers, in the same run. The healthy clusters' etcd is etcdSim.
// Run with BENCH_REPORT=1 (make bench-scale).
func TestScaleReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench-scale) to measure")
	}
	harness.Require(t)
	rounds := max(2, envInt("BENCH_SCALE_ROUNDS", 3))

	r := startScaleRun(t, newFleet(scaleClusters, unreachableAt))
	warm, healthy, all := r.warmUp(t)
	alone := r.phase(t, healthy, rounds)
	mixed := r.phase(t, all, rounds)

	report := scaleReport(warm, len(healthy), alone, mixed)
	t.Logf("%d clusters of 3 members, %d of them unreachable, %d workers, %d rounds per phase, %d cores:\n%s",
		scaleClusters, len(unreachableAt), scaleWorkers, rounds, runtime.NumCPU(), report)
	if path := os.Getenv("BENCH_SCALE_FILE"); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scaleRun is the hook process, the etcd it reaches and the client that
// plays Metacontroller.
type scaleRun struct {
	fleet  []fleetCluster
	hook   *harness.HookProcess
	sim    *etcdSim
	client *http.Client
}

func startScaleRun(t *testing.T, fleet []fleetCluster) *scaleRun {
	binDir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "etcd-hook")
	harness.RequireBinary(t, bin, "make build")

	simListener, err := listenLoopback(sync.ClientPort)
	if err != nil {
		t.Fatal(err)
	}
	sim := newEtcdSim()
	for _, c := range fleet {
		if !c.unreachable {
			sim.addCluster(fleetNamespace, c.name, c.members)
		}
	}
	sim.serve(simListener)
	t.Cleanup(sim.stop)
	holeListener, err := listenLoopback(sync.ClientPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serveBlackhole(holeListener))
	resolve, err := fleetDNS(fleet, listenerIP(simListener), listenerIP(holeListener))
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
		client: &http.Client{Timeout: hookTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: scaleWorkers}},
	}
}

// target is one cluster and the request Metacontroller sends for it.
type target struct {
	cluster fleetCluster
	request []byte
}

// warmUp syncs every healthy cluster once with an empty status and keeps
// the status the hook answers, which Metacontroller would send back from
// then on: the steady state. The unreachable clusters were running before
// their etcd stopped answering.
func (r *scaleRun) warmUp(t *testing.T) (calls simCounts, healthy, all []target) {
	all = make([]target, len(r.fleet))
	var probs problems
	before := r.sim.counts()
	forEach(len(r.fleet), func(i int) {
		c := r.fleet[i]
		status := v1beta2.ClusterStatus{Phase: v1beta2.PhaseRunning, Size: len(c.members)}
		if !c.unreachable {
			var err error
			if status, err = r.firstSync(c); err != nil {
				probs.add(c.name, err)
				return
			}
		}
		req, err := clusterRequest(c.name, c.uid, c.members, etcdtest.DefaultVersion, status)
		if err != nil {
			probs.add(c.name, err)
		}
		all[i] = target{cluster: c, request: req}
	})
	if err := probs.err(); err != nil {
		t.Fatalf("first syncs: %v", err)
	}
	for _, tg := range all {
		if !tg.cluster.unreachable {
			healthy = append(healthy, tg)
		}
	}
	calls = r.sim.counts().since(before)
	if err := calls.err(); err != nil {
		t.Fatalf("first syncs: %v", err)
	}
	return calls, healthy, all
}

func (r *scaleRun) firstSync(c fleetCluster) (v1beta2.ClusterStatus, error) {
	req, err := clusterRequest(c.name, c.uid, c.members, etcdtest.DefaultVersion, v1beta2.ClusterStatus{})
	if err != nil {
		return v1beta2.ClusterStatus{}, err
	}
	answer, _, err := r.sync(req)
	if err != nil {
		return v1beta2.ClusterStatus{}, err
	}
	return steadyStatus(answer, c.members)
}

// phaseResult is one phase: every sync's latency, and the hook's and
// etcd's view of it.
type phaseResult struct {
	healthy, unreachable []time.Duration
	wall                 time.Duration
	calls                simCounts
	hook                 procStatus
	metrics              map[string]float64
}

// phase syncs the targets round-robin, rounds times over, as
// Metacontroller's workers take parents from its queue.
func (r *scaleRun) phase(t *testing.T, targets []target, rounds int) phaseResult {
	n := len(targets) * rounds
	latency := make([]time.Duration, n)
	var probs problems
	before := r.sim.counts()
	start := time.Now()
	forEach(n, func(i int) {
		tg := targets[i%len(targets)]
		answer, d, err := r.sync(tg.request)
		latency[i] = d
		if err == nil && !tg.cluster.unreachable {
			_, err = steadyStatus(answer, tg.cluster.members)
		}
		if err != nil {
			probs.add(tg.cluster.name, err)
		}
	})
	res := phaseResult{wall: time.Since(start), calls: r.sim.counts().since(before)}
	for i, d := range latency {
		if targets[i%len(targets)].cluster.unreachable {
			res.unreachable = append(res.unreachable, d)
		} else {
			res.healthy = append(res.healthy, d)
		}
	}
	if err := probs.err(); err != nil {
		t.Errorf("syncs: %v", err)
	}
	if err := res.calls.err(); err != nil {
		t.Error(err)
	}
	proc := r.hook.Proc()
	if proc == nil {
		t.Fatal("the hook exited")
	}
	var err error
	if res.hook, err = readProcStatus(proc.Pid); err != nil {
		t.Fatal(err)
	}
	if res.metrics, err = scrapeMetrics(r.client, r.hook.URL()+"/metrics", metricGoroutines, metricHeapInUse); err != nil {
		t.Fatal(err)
	}
	return res
}

// sync posts one request as Metacontroller does, and returns the answer of
// a 200 and the round-trip time.
func (r *scaleRun) sync(body []byte) ([]byte, time.Duration, error) {
	start := time.Now()
	resp, err := r.client.Post(r.hook.URL()+"/sync", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, time.Since(start), err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	d := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, answer)
	}
	return answer, d, err
}

// steadyStatus checks that an answer leaves a converged cluster as it is
// (its Pods, and Progressing=False with reason Converged) and returns its
// status.
func steadyStatus(answer []byte, members []string) (v1beta2.ClusterStatus, error) {
	var a struct {
		Status   v1beta2.ClusterStatus `json:"status"`
		Children []struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"children"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return v1beta2.ClusterStatus{}, fmt.Errorf("answer: %w", err)
	}
	var pods []string
	for _, c := range a.Children {
		if c.Kind == "Pod" {
			pods = append(pods, c.Metadata.Name)
		}
	}
	slices.Sort(pods)
	converged := slices.ContainsFunc(a.Status.Conditions, func(c v1beta2.ClusterCondition) bool {
		return c.Type == v1beta2.ConditionProgressing && c.Reason == sync.ReasonConverged
	})
	if want := slices.Sorted(slices.Values(members)); !converged || !slices.Equal(pods, want) {
		status, _ := json.Marshal(a.Status)
		return v1beta2.ClusterStatus{}, fmt.Errorf("not a steady answer: Pods %v (want %v), status %s", pods, want, status)
	}
	return a.Status, nil
}

// forEach calls fn for 0..n-1 from scaleWorkers goroutines, each taking
// the next index when done with its last, as Metacontroller's workers take
// the next parent from its queue.
func forEach(n int, fn func(i int)) {
	var next atomic.Int64
	var wg gosync.WaitGroup
	for range scaleWorkers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// problems keeps the first few failures of many syncs and counts the
// rest, so that a mistake that hits every sync reads as one.
type problems struct {
	mu    gosync.Mutex
	n     int
	first []string
}

func (p *problems) add(cluster string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if len(p.first) < 3 {
		p.first = append(p.first, cluster+": "+err.Error())
	}
}

func (p *problems) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return nil
	}
	return fmt.Errorf("%d failed, the first:\n%s", p.n, strings.Join(p.first, "\n"))
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
