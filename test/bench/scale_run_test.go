package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/plan"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// target is one cluster and the request Metacontroller sends for it.
type target struct {
	// index is the cluster's place in the fleet.
	index   int
	cluster fleetCluster
	request []byte
}

// warmUp syncs every healthy cluster once with an empty status and keeps
// the status the hook answers, which Metacontroller would send back from
// then on: the steady state. The unreachable clusters were running before
// their etcd stopped answering. It goes through the fleet in two parts,
// the first checkpoint clusters and then the rest, and reads the hook's
// memory after each: the second minus the first is what the hook keeps
// per cluster beyond its bounded connections, once checkpoint clusters
// have filled them.
func (r *scaleRun) warmUp(t *testing.T, checkpoint int) (calls fleetCounts, healthy, all []target, memory []hookUsage, retried *problems) {
	fleet := r.env.fleet
	all = make([]target, len(fleet))
	var probs problems
	retried = &problems{}
	before := r.counts()
	for _, part := range [][2]int{{0, min(checkpoint, len(fleet))}, {min(checkpoint, len(fleet)), len(fleet)}} {
		forEach(part[1]-part[0], r.env.shape.workers, func(j int) {
			i := part[0] + j
			c := fleet[i]
			var req []byte
			var err error
			if c.unreachable {
				req, err = c.request(v1beta2.ClusterStatus{Phase: v1beta2.PhaseRunning, Size: len(c.members)})
			} else {
				// The first clusters' steady requests are synced once more
				// to check that the hook keeps their Pods (plain and TLS
				// alike); the rest are built the same way.
				req, err = retry(retried, c.name, func() ([]byte, error) { return r.firstSync(c, i < keptChecks) })
			}
			if err != nil {
				probs.add(c.name, err)
				return
			}
			all[i] = target{index: i, cluster: c, request: req}
		})
		m := r.snapshot(t, 0)
		m.syncs = part[1]
		memory = append(memory, m)
	}
	calls = r.counts().since(before)
	if err := errors.Join(calls.err(), probs.err()); err != nil {
		t.Fatalf("first syncs: %v", err)
	}
	for _, tg := range all {
		if !tg.cluster.unreachable {
			healthy = append(healthy, tg)
		}
	}
	return calls, healthy, all, memory, retried
}

// warmAttempts bounds the attempts at a sync before the phases: a first
// sync dials every member, and a machine busy with the first syncs of a
// whole fleet may take longer than the hook gives a connection (0.5 s),
// which then answers that members are unreachable. Metacontroller would
// sync the cluster again; so does warmUp, and the report counts it.
const warmAttempts = 3

// retry calls fn until it succeeds, at most warmAttempts times, and adds
// each failure but the last to retried.
func retry[T any](retried *problems, cluster string, fn func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := fn()
		if err == nil || attempt == warmAttempts {
			return v, err
		}
		retried.add(cluster, err)
	}
}

// snapshot is the memory of the hook-th hook now.
func (r *scaleRun) snapshot(t *testing.T, hook int) hookUsage {
	proc := r.hooks[hook].Proc()
	if proc == nil {
		t.Fatalf("hook %d exited", hook)
	}
	var u hookUsage
	var err error
	if u.proc, err = readProcStatus(proc.Pid); err != nil {
		t.Fatal(err)
	}
	if u.metrics, err = scrapeMetrics(r.clients[hook], r.hooks[hook].URL()+"/metrics", metricGoroutines, metricHeapInUse, metricNextGC, metricOwned, metricReceived); err != nil {
		t.Fatal(err)
	}
	return u
}

// idleUsage is the CPU the hooks and this process use when no sync is
// made, over the given time: the collector, timers, the kept
// connections' upkeep. A phase's CPU per sync carries its share of it.
type idleUsage struct {
	wall, hook, test time.Duration
}

func (r *scaleRun) idle(t *testing.T, wall time.Duration) idleUsage {
	read := func() (hook, test time.Duration) {
		for i, h := range r.hooks {
			proc := h.Proc()
			if proc == nil {
				t.Fatalf("hook %d exited", i)
			}
			d, err := readProcCPU(proc.Pid)
			if err != nil {
				t.Fatal(err)
			}
			hook += d
		}
		test, err := readProcCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		return hook, test
	}
	hook0, test0 := read()
	start := time.Now()
	time.Sleep(wall)
	hook1, test1 := read()
	return idleUsage{wall: time.Since(start), hook: hook1 - hook0, test: test1 - test0}
}

// keptChecks is how many of the fleet's first clusters warmUp syncs twice.
const keptChecks = 20

// firstSync syncs a cluster from an empty status and returns its steady
// request: what Metacontroller sends once it has applied that answer, the
// status the hook wrote, and each member Pod last applied as the hook
// answered it, with that answer's labels and annotations. With check it
// syncs that request too, whose answer must keep every Pod exactly as last
// applied: a request whose Pods the hook relabels on every sync would
// cost it a decode of each Pod that no steady cluster costs.
func (r *scaleRun) firstSync(c fleetCluster, check bool) ([]byte, error) {
	req, err := c.request(v1beta2.ClusterStatus{})
	if err != nil {
		return nil, err
	}
	answer, _, err := r.sync(0, req)
	if err != nil {
		return nil, err
	}
	status, err := steadyStatus(answer, c.members)
	if err != nil {
		return nil, err
	}
	if req, err = c.request(status); err != nil {
		return nil, err
	}
	if req, err = podsAsAnswered(req, answer); err != nil || !check {
		return req, err
	}
	if answer, _, err = r.sync(0, req); err != nil {
		return nil, err
	}
	if _, err := steadyStatus(answer, c.members); err != nil {
		return nil, err
	}
	return req, keptPods(req, answer)
}

// keptPods checks that every member Pod of an answer is the one the
// request says was last applied, byte for byte once compacted.
func keptPods(request, answer []byte) error {
	var req struct {
		Children map[string]map[string]struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		} `json:"children"`
	}
	var ans struct {
		Children []json.RawMessage `json:"children"`
	}
	if err := json.Unmarshal(request, &req); err != nil {
		return err
	}
	if err := json.Unmarshal(answer, &ans); err != nil {
		return err
	}
	for _, raw := range ans.Children {
		var child struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &child); err != nil {
			return err
		}
		if child.Kind != plan.KindPod {
			continue
		}
		applied := req.Children[hooks.ChildPods][child.Metadata.Name].Metadata.Annotations[plan.LastAppliedAnnotation]
		var got, want bytes.Buffer
		if json.Compact(&got, raw) != nil || json.Compact(&want, []byte(applied)) != nil || got.String() != want.String() {
			return fmt.Errorf("the steady request's Pod %s is not kept as last applied: answered %.300s, last applied %.300s", child.Metadata.Name, raw, applied)
		}
	}
	return nil
}

// warmEach sends every target's steady request to every hook once, as
// fast as the workers go: what each replica has seen after a few resyncs,
// since Metacontroller's workers take any cluster over any connection.
func (r *scaleRun) warmEach(t *testing.T, targets []target) (retried *problems) {
	var probs problems
	retried = &problems{}
	before := r.counts()
	n := len(r.hooks)
	forEach(len(targets)*n, r.env.shape.workers, func(i int) {
		tg := targets[i/n]
		_, err := retry(retried, tg.cluster.name, func() (struct{}, error) {
			answer, _, err := r.sync(i%n, tg.request)
			if err == nil && !tg.cluster.unreachable {
				_, err = steadyStatus(answer, tg.cluster.members)
			}
			return struct{}{}, err
		})
		if err != nil {
			probs.add(tg.cluster.name, err)
		}
	})
	if err := errors.Join(r.counts().since(before).err(), probs.err()); err != nil {
		t.Fatalf("replicas' first syncs: %v", err)
	}
	return retried
}

// phaseResult is one phase: every sync's latency, and the hooks', etcd's
// and the machine's view of it.
type phaseResult struct {
	// plain are the syncs of healthy plain clusters, tls those of
	// healthy clusters with spec.TLS.
	plain, tls, unreachable []time.Duration
	// serviceHealthy are the healthy syncs' round trips, post to answer:
	// the time a worker spends on each.
	serviceHealthy []time.Duration
	// waits are every sync's time from due to a worker posting it, in
	// the order they fell due: a queue that grows shows as waits that do.
	waits []time.Duration
	// nTargets counts the clusters the phase synced round-robin.
	nTargets int
	// due is the rate at which syncs fell due; wall how long the phase
	// took, from the first due to the last done.
	due  float64
	wall time.Duration
	// calls are what the plain clusters' etcd served, tlsCalls the TLS
	// clusters'.
	calls, tlsCalls simCounts
	// hooks are each hook process's figures, in the order of the run's.
	hooks []hookUsage
	// test is this process (the etcd sims, the DNS server, the client
	// playing Metacontroller): its CPU time in the phase, and its memory.
	testCPU time.Duration
	test    procStatus
	// machineCPU is what every process on the machine used in the phase.
	machineCPU time.Duration
	dnsQueries int64
	// failed counts the syncs that got no steady answer (an error, a
	// timeout, an answer that changes the cluster); firstFailures are the
	// first few.
	failed        int
	firstFailures string
}

// hookUsage is one hook process in a phase.
type hookUsage struct {
	proc procStatus
	// cpu is its CPU time (user and system) in the phase.
	cpu     time.Duration
	metrics map[string]float64
	// syncs are the requests it answered in the phase.
	syncs int
}

// phase makes n syncs of the targets due round-robin at a steady rate, as
// resyncs and events make parents due, and the run's workers take them in
// order, as Metacontroller's workers take parents from its queue. A sync's
// latency runs from the moment it was due, so a worker held by one
// cluster shows as the wait of the syncs queued behind it. With several
// hooks each sync goes to one of them at random.
func (r *scaleRun) phase(t *testing.T, targets []target, n int, rate float64) phaseResult {
	cpuBefore := make([]time.Duration, len(r.hooks))
	for i, h := range r.hooks {
		proc := h.Proc()
		if proc == nil {
			t.Fatalf("hook %d exited", i)
		}
		var err error
		if cpuBefore[i], err = readProcCPU(proc.Pid); err != nil {
			t.Fatal(err)
		}
	}
	testBefore, err := readProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	machineBefore, err := readMachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	dnsBefore := r.env.dns.Queries.Load()
	latency, service := make([]time.Duration, n), make([]time.Duration, n)
	served := make([]atomic.Int64, len(r.hooks))
	check := newAnswerCheck(len(r.env.fleet))
	var probs problems
	before := r.counts()
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	forEach(n, r.env.shape.workers, func(i int) {
		due := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(due))
		tg := targets[i%len(targets)]
		hook := 0
		if len(r.hooks) > 1 {
			hook = rand.IntN(len(r.hooks))
		}
		answer, took, err := r.sync(hook, tg.request)
		latency[i], service[i] = time.Since(due), took
		served[hook].Add(1)
		if err == nil && !tg.cluster.unreachable {
			err = check.steady(tg, answer)
		}
		if err != nil {
			probs.add(tg.cluster.name, err)
		}
	})
	calls := r.counts().since(before)
	res := phaseResult{due: rate, wall: time.Since(start), calls: calls.plain, tlsCalls: calls.tls, nTargets: min(n, len(targets))}
	res.dnsQueries = r.env.dns.Queries.Load() - dnsBefore
	machineAfter, err := readMachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	res.machineCPU = machineAfter - machineBefore
	testAfter, err := readProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	res.testCPU = testAfter - testBefore
	if res.test, err = readProcStatus(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	for i, d := range latency {
		res.waits = append(res.waits, d-service[i])
		switch c := targets[i%len(targets)].cluster; {
		case c.unreachable:
			res.unreachable = append(res.unreachable, d)
		case c.tls != nil:
			res.tls = append(res.tls, d)
			res.serviceHealthy = append(res.serviceHealthy, service[i])
		default:
			res.plain = append(res.plain, d)
			res.serviceHealthy = append(res.serviceHealthy, service[i])
		}
	}
	if err := probs.err(); err != nil {
		// Reported, and the report still written: at the fleet's full
		// size a machine that cannot keep up times syncs out.
		t.Errorf("syncs: %v", err)
		res.failed, res.firstFailures = probs.count(), err.Error()
	}
	if err := calls.err(); err != nil {
		t.Error(err)
	}
	for i, h := range r.hooks {
		proc := h.Proc()
		if proc == nil {
			t.Fatalf("hook %d exited", i)
		}
		u := hookUsage{syncs: int(served[i].Load())}
		cpuAfter, err := readProcCPU(proc.Pid)
		if err != nil {
			t.Fatal(err)
		}
		u.cpu = cpuAfter - cpuBefore[i]
		if u.proc, err = readProcStatus(proc.Pid); err != nil {
			t.Fatal(err)
		}
		if u.metrics, err = scrapeMetrics(r.clients[i], h.URL()+"/metrics", metricGoroutines, metricHeapInUse, metricNextGC, metricOwned, metricReceived); err != nil {
			t.Fatal(err)
		}
		res.hooks = append(res.hooks, u)
	}
	return res
}

// The clusters of keptPhase take at most this part (in tenths) of the
// connections the hook keeps.
const keptTenths = 9

// keptPhase syncs the first healthy clusters whose member endpoints fit
// the connections the hook keeps (etcdclient.DefaultMaxIdleConns, the
// hook's default), round-robin, after one sync of each to dial them: a
// steady sync that dials nothing, the same kinds of clusters in the same
// proportions as the fleet. For about 20 s at the fleet's rate, and at
// least 25 syncs a second, so that its CPU time is well above the clock
// tick it is counted in.
func (r *scaleRun) keptPhase(t *testing.T, healthy []target) phaseResult {
	k := min(len(healthy), keptTenths*etcdclient.DefaultMaxIdleConns/10/scaleMembers)
	subset := healthy[:k]
	var probs problems
	forEach(len(subset), r.env.shape.workers, func(i int) {
		if _, _, err := r.sync(0, subset[i].request); err != nil {
			probs.add(subset[i].cluster.name, err)
		}
	})
	if err := probs.err(); err != nil {
		t.Fatalf("dialing the clusters of the kept phase: %v", err)
	}
	rate := max(r.env.shape.rate, 25)
	return r.phase(t, subset, int(rate*keptPhaseSeconds), rate)
}

const keptPhaseSeconds = 20

// fleetCounts are what the plain and the TLS clusters' etcd served.
type fleetCounts struct{ plain, tls simCounts }

func (r *scaleRun) counts() fleetCounts {
	return fleetCounts{plain: r.env.sim.counts(), tls: r.env.simTLS.counts()}
}

func (c fleetCounts) since(before fleetCounts) fleetCounts {
	return fleetCounts{plain: c.plain.since(before.plain), tls: c.tls.since(before.tls)}
}

func (c fleetCounts) err() error { return errors.Join(c.plain.err(), c.tls.err()) }

// sync posts one request to the hook-th hook as Metacontroller does, and
// returns the answer of a 200 and the round-trip time.
func (r *scaleRun) sync(hook int, body []byte) ([]byte, time.Duration, error) {
	start := time.Now()
	resp, err := r.clients[hook].Post(r.hooks[hook].URL()+"/sync", "application/json", bytes.NewReader(body))
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

// answerCheck checks answers with steadyStatus, once per cluster and
// answer: an answer the same, byte for byte, as the last one checked for
// its cluster (by hash) is steady too. Decoding every answer would cost
// the test process as much CPU as decoding a request costs the hook.
type answerCheck struct {
	seed    maphash.Seed
	checked []atomic.Uint64
}

func newAnswerCheck(clusters int) *answerCheck {
	return &answerCheck{seed: maphash.MakeSeed(), checked: make([]atomic.Uint64, clusters)}
}

func (a *answerCheck) steady(tg target, answer []byte) error {
	h := maphash.Bytes(a.seed, answer) | 1
	if a.checked[tg.index].Load() == h {
		return nil
	}
	if _, err := steadyStatus(answer, tg.cluster.members); err != nil {
		return err
	}
	a.checked[tg.index].Store(h)
	return nil
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

// forEach calls fn for 0..n-1 from the given number of goroutines, each
// taking the next index when done with its last, as Metacontroller's
// workers take the next parent from its queue.
func forEach(n, workers int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
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

// firstOne is the first failure kept, on one line.
func (p *problems) firstOne() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.first) == 0 {
		return ""
	}
	return strings.ReplaceAll(p.first[0], "\n", " ")
}

func (p *problems) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *problems) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return nil
	}
	return fmt.Errorf("%d failed, the first:\n%s", p.n, strings.Join(p.first, "\n"))
}
