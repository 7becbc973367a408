package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// target is one cluster and the request Metacontroller sends for it.
type target struct {
	cluster fleetCluster
	request []byte
}

// warmUp syncs every healthy cluster once with an empty status and keeps
// the status the hook answers, which Metacontroller would send back from
// then on: the steady state. The unreachable clusters were running before
// their etcd stopped answering.
func (r *scaleRun) warmUp(t *testing.T) (calls fleetCounts, healthy, all []target) {
	all = make([]target, len(r.fleet))
	var probs problems
	before := r.counts()
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
		req, err := c.request(status)
		if err != nil {
			probs.add(c.name, err)
			return
		}
		all[i] = target{cluster: c, request: req}
	})
	calls = r.counts().since(before)
	if err := errors.Join(calls.err(), probs.err()); err != nil {
		t.Fatalf("first syncs: %v", err)
	}
	for _, tg := range all {
		if !tg.cluster.unreachable {
			healthy = append(healthy, tg)
		}
	}
	return calls, healthy, all
}

func (r *scaleRun) firstSync(c fleetCluster) (v1beta2.ClusterStatus, error) {
	req, err := c.request(v1beta2.ClusterStatus{})
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
	// healthy are the syncs of healthy plain clusters, tls those of
	// healthy clusters with spec.TLS.
	healthy, tls, unreachable []time.Duration
	wall                      time.Duration
	// calls are what the plain clusters' etcd served, tlsCalls the TLS
	// clusters'.
	calls, tlsCalls simCounts
	hook            procStatus
	// cpu is the hook process's CPU time (user and system) in the phase.
	cpu     time.Duration
	metrics map[string]float64
}

// phase makes the targets' syncs due round-robin at a steady rate, as
// resyncs and events make parents due, and scaleWorkers workers take them
// in order, as Metacontroller's workers take parents from its queue. A
// sync's latency runs from the moment it was due, so a worker held by one
// cluster shows as the wait of the syncs queued behind it.
func (r *scaleRun) phase(t *testing.T, targets []target, rounds int, rate float64) phaseResult {
	proc := r.hook.Proc()
	if proc == nil {
		t.Fatal("the hook exited")
	}
	cpuBefore, err := readProcCPU(proc.Pid)
	if err != nil {
		t.Fatal(err)
	}
	n := len(targets) * rounds
	latency := make([]time.Duration, n)
	var probs problems
	before := r.counts()
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	forEach(n, func(i int) {
		due := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(due))
		tg := targets[i%len(targets)]
		answer, _, err := r.sync(tg.request)
		latency[i] = time.Since(due)
		if err == nil && !tg.cluster.unreachable {
			_, err = steadyStatus(answer, tg.cluster.members)
		}
		if err != nil {
			probs.add(tg.cluster.name, err)
		}
	})
	calls := r.counts().since(before)
	res := phaseResult{wall: time.Since(start), calls: calls.plain, tlsCalls: calls.tls}
	for i, d := range latency {
		switch c := targets[i%len(targets)].cluster; {
		case c.unreachable:
			res.unreachable = append(res.unreachable, d)
		case c.tls != nil:
			res.tls = append(res.tls, d)
		default:
			res.healthy = append(res.healthy, d)
		}
	}
	if err := probs.err(); err != nil {
		t.Errorf("syncs: %v", err)
	}
	if err := calls.err(); err != nil {
		t.Error(err)
	}
	cpuAfter, err := readProcCPU(proc.Pid)
	if err != nil {
		t.Fatal(err)
	}
	res.cpu = cpuAfter - cpuBefore
	if res.hook, err = readProcStatus(proc.Pid); err != nil {
		t.Fatal(err)
	}
	if res.metrics, err = scrapeMetrics(r.client, r.hook.URL()+"/metrics", metricGoroutines, metricHeapInUse, metricNextGC); err != nil {
		t.Fatal(err)
	}
	return res
}

// fleetCounts are what the plain and the TLS clusters' etcd served.
type fleetCounts struct{ plain, tls simCounts }

func (r *scaleRun) counts() fleetCounts {
	return fleetCounts{plain: r.sim.counts(), tls: r.simTLS.counts()}
}

func (c fleetCounts) since(before fleetCounts) fleetCounts {
	return fleetCounts{plain: c.plain.since(before.plain), tls: c.tls.since(before.tls)}
}

func (c fleetCounts) err() error { return errors.Join(c.plain.err(), c.tls.err()) }

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
		return c.Type == v1beta2.ConditionProgressing && c.Reason == etcdcluster.ReasonConverged
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
	var wg sync.WaitGroup
	for range scaleWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// problems keeps the first few failures of many syncs and counts the
// rest, so that a mistake that hits every sync reads as one.
type problems struct {
	mu    sync.Mutex
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
