package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// No client is ever sent to a learner. A learner's Pod passes its
// readiness probe (a learner answers serializable reads), but it refuses
// writes and linearizable reads ("etcdserver: rpc not supported for
// learner"), so the client Service must leave its Pod out until etcd
// calls it a voter caught up with the leader. While every membership
// change that makes a learner runs, a sampler checks the client Service's
// ready endpoints against etcd's learners, and a client goes round those
// endpoints as kube-proxy would send it. A restore makes no learner: its
// members restore from the store and start together (TestRestore checks
// that none is ever a learner, and that no client reaches one that does
// not serve yet).

const (
	// servingSamplePause: a learner stays one for seconds (its Pod starts,
	// it catches up, the next sync promotes it), so a few samples land in
	// every learner's life.
	servingSamplePause = 200 * time.Millisecond
	// servingMemberListTimeout bounds one sample's member list; learners
	// and members on their way out refuse it or do not answer, and the
	// sample asks the next member.
	servingMemberListTimeout = time.Second
	// roundRobinPause keeps the round-robin client from competing with
	// the etcd processes and the writer for two cores.
	roundRobinPause = 20 * time.Millisecond
	// servingData is what a new member catches up on: enough that a
	// learner with a Ready Pod is not a matter of milliseconds.
	servingData = 64 << 20
	// servingHold is how long holdLearner keeps a learner with a Ready
	// Pod: several samples, and a round of the round-robin client.
	servingHold = 2 * time.Second
	// learnerRefusal is etcd's error to a learner's client, in every
	// release that has learners.
	learnerRefusal = "not supported for learner"
)

// An emptyDir rollout, a scale-out with 64 MiB to catch up on and a dead
// member's replacement, on one cluster, with no learner among the client
// Service's endpoints at any sample and no client refused by one. The
// scale-out and the replacement each hold a learner with a Ready Pod
// (holdLearner), so that the test meets that state whatever the machine's
// speed; the rollout's learners come as they come.
func TestNoClientReachesALearner(t *testing.T) {
	s := newFaultScenario(t, harness.Options{})
	// The rollout's label is there from the start: rollResources checks it
	// on every new Pod.
	s.createSpec("setup (emptyDir)", map[string]any{"size": 3, "version": faultVersion,
		"pod": map[string]any{"labels": map[string]any{rolloutLabel: rolloutLabelValue}}})
	w := watchServing(t, s.c)

	// The rollout first, on a small database: rollResources requires a
	// sample of the members every 200 ms on average, which a rollout over
	// 64 MiB (five learners each catching up on it, on two cores) was
	// seen to miss.
	s.rollResources("emptyDir", 3, false, map[string]string{"cpu": "100m", "memory": "64Mi"})
	// rollResources checked its writer: every acknowledged put was read back.
	_, acked := s.w.Counts()
	w.reportServing("rolling change of resources, 3 members (emptyDir)", w.check("rolling change of resources, 3 members (emptyDir)"), Figure{Acked: acked})

	s.fill("/serving/data/", servingData)
	// The scale-out's learner is the replacement's, on a larger cluster:
	// make test-full runs it, make test (-short) the replacement alone.
	size := 3
	if !testing.Short() {
		step := "scale 3→5 with 64 MiB"
		s.startWriter("serving-scale")
		s.waitWrites(writesAround)
		start, syncs := time.Now(), s.syncs()
		s.patchSize(5)
		s.holdLearner(step)
		fig := s.converge(step, start, syncs, 5)
		w.reportServing(step, w.checkHeld(step), fig)
		size = 5
	}

	step := "a dead member replaced (emptyDir, 64 MiB)"
	s.startWriter("serving-dead-member")
	s.waitWrites(writesAround)
	// A follower: its replacement is the same learner → promote as the
	// leader's, without an election on top.
	leader := s.leader()
	var victim string
	for _, p := range s.c.Pods() {
		if p.Name != leader && !p.Terminating {
			victim = p.Name
			break
		}
	}
	start, syncs := time.Now(), s.syncs()
	if err := s.env.DeletePod(ns, victim); err != nil {
		t.Fatal(err)
	}
	s.holdLearner(step)
	fig := s.converge(step, start, syncs, size)
	if _, ok := s.members()[victim]; ok {
		t.Errorf("%s: %s is still a member after its Pod was deleted on emptyDir", step, victim)
	}
	w.reportServing(step, w.stopHeld(step), fig)
}

// reportServing puts a step's line in the failure table (RELIABILITY.md).
func (w *servingWatch) reportServing(step string, win servingWindow, fig Figure) {
	w.t.Helper()
	f := Failure{
		Fault:    "learners in the cluster: " + step,
		Expected: "no learner among the client Service's ready endpoints at any sample; no client sent to one is refused",
		Observed: fmt.Sprintf("%d samples, %d with a learner (%d with its Pod Ready), %d with a learner among the ready endpoints; round-robin client over the ready endpoints: %d operations, %d refused by a learner",
			win.Samples, win.LearnerSamples, win.ReadyLearnerSamples, win.Violations, win.Ops, win.Refused),
		Acked: fig.Acked, Lost: fig.Lost, Undisturbed: true,
	}
	ReportFailure(w.t, f)
}

// holdLearner keeps the hook from acting, its syncs failing as when it is
// down, from the moment etcd lists a learner until that learner's Pod has
// been Ready for servingHold. Left alone, the hook promotes a learner
// within a sync of its Pod turning Ready, which on a fast machine can fall
// between two samples: held, the learner with a Ready Pod (the state a
// Service that selects Ready Pods alone sends clients into) lasts
// whatever the machine's speed.
func (s *scenario) holdLearner(step string) {
	s.t.Helper()
	var learner string
	err := s.env.WaitFor(convergeTimeout, step+": a learner", func() (bool, string) {
		ms, err := s.c.Members(s.env.Ctx())
		if err != nil {
			return false, err.Error()
		}
		for _, m := range ms {
			if m.IsLearner {
				learner = memberPodName(m)
				return true, ""
			}
		}
		return false, DescribeMembers(ms)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	// The sync that added the learner has its answer, and the learner's
	// Pod with it, on the way: only later syncs fail.
	release := s.env.Proxy.Inject(harness.Fault{Path: "/sync", Parent: ns + "/" + exampleName, Status: http.StatusServiceUnavailable})
	defer release()
	err = s.env.WaitFor(convergeTimeout, step+": the Pod of learner "+learner+" Ready", func() (bool, string) {
		p := podByName(s.c.Pods(), learner)
		return p.Ready, fmt.Sprintf("%+v", p)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	time.Sleep(servingHold)
	ms, err := s.c.Members(s.env.Ctx())
	if err != nil {
		s.t.Fatal(err)
	}
	if !slices.ContainsFunc(ms, func(m *etcdserverpb.Member) bool { return m.IsLearner && memberPodName(m) == learner }) {
		s.t.Errorf("%s: %s was promoted while the hook was held: %s", step, learner, DescribeMembers(ms))
	}
	s.t.Logf("%s: learner %s held with a Ready Pod for %s", step, learner, servingHold)
}

// fill puts size bytes under prefix, in values of fillValueSize, through
// every member.
func (s *scenario) fill(prefix string, size int) {
	s.t.Helper()
	cli, err := NewClient(s.c.MemberURLs()...)
	if err != nil {
		s.t.Fatal(err)
	}
	defer cli.Close()
	value := strings.Repeat("x", fillValueSize)
	n := (size + fillValueSize - 1) / fillValueSize
	start := time.Now()
	keys := make(chan int)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	// A few puts in flight: one at a time would wait on every fsync.
	for range 4 {
		wg.Go(func() {
			for i := range keys {
				ctx, cancel := context.WithTimeout(s.env.Ctx(), 10*time.Second)
				_, err := cli.Put(ctx, fmt.Sprintf("%s%06d", prefix, i), value)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("fill: put %d of %d: %w", i, n, err)
					// Take the rest, so that the feeder never blocks.
					for range keys {
					}
					return
				}
			}
		})
	}
	for i := range n {
		keys <- i
	}
	close(keys)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(s.env.Ctx(), 5*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, s.c.MemberURL(s.leader()))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("fill: %d values of %d KiB in %s; the leader's database is %.1f MiB",
		n, fillValueSize>>10, round(time.Since(start)), float64(st.DbSize)/(1<<20))
}

// servingWatch is the sampler and the round-robin client. What they see
// is judged by window: check and stop judge what was seen since the last
// check.
type servingWatch struct {
	t      *testing.T
	c      *Cluster
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu  sync.Mutex
	win servingWindow
}

// servingWindow is what the sampler and the round-robin client saw in one
// window.
type servingWindow struct {
	// Samples are those with both the endpoints and etcd's member list;
	// Unknown those whose member list no member gave.
	Samples, Unknown int
	// LearnerSamples had a learner in etcd's list; ReadyLearnerSamples had
	// a learner whose Pod was Ready: one a Service selecting every member
	// Pod would have sent clients to.
	LearnerSamples, ReadyLearnerSamples int
	Learners                            map[string]bool
	// Violations are samples with a learner among the ready endpoints;
	// Examples renders the first sample of each (endpoints, learners)
	// seen, up to servingExamples.
	Violations  int
	Examples    []string
	lastExample string

	// Ops are the round-robin client's puts and reads, OK those that
	// succeeded; Refused those a learner refused (RefusedExamples the
	// first few); Other the other errors by kind.
	Ops, OK, Refused int
	RefusedExamples  []string
	Other            map[string]int
	// Addresses are the endpoints the client reached; NoEndpoint the
	// times it found none ready.
	Addresses  map[string]bool
	NoEndpoint int
}

const servingExamples = 10

// watchServing starts the sampler and the round-robin client on the
// cluster's client Service; they stop with the test at the latest.
func watchServing(t *testing.T, c *Cluster) *servingWatch {
	ctx, cancel := context.WithCancel(c.Env.Ctx())
	w := &servingWatch{t: t, c: c, cancel: cancel}
	w.win.reset()
	w.wg.Go(func() { w.sampleLoop(ctx) })
	w.wg.Go(func() { w.roundRobin(ctx) })
	t.Cleanup(w.halt)
	return w
}

func (win *servingWindow) reset() {
	*win = servingWindow{Learners: map[string]bool{}, Other: map[string]int{}, Addresses: map[string]bool{}}
}

func (w *servingWatch) halt() {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
	})
}

// checkHeld is check for a window in which holdLearner held a learner:
// the sampler must have seen its Pod Ready.
func (w *servingWatch) checkHeld(step string) servingWindow {
	w.t.Helper()
	win := w.check(step)
	if win.ReadyLearnerSamples == 0 {
		w.t.Errorf("%s: no sample saw a learner with a Ready Pod, though one was held", step)
	}
	return win
}

// stopHeld is stop for a window in which holdLearner held a learner.
func (w *servingWatch) stopHeld(step string) servingWindow {
	w.t.Helper()
	w.halt()
	return w.checkHeld(step)
}

// stopWithoutLearners ends a window in which no member may ever be a
// learner: a restore's members restore from the store and start
// together. A learner seen fails it, as does a client sent to a member
// that refused it.
func (w *servingWatch) stopWithoutLearners(step string) {
	w.t.Helper()
	w.halt()
	w.mu.Lock()
	win := w.win
	w.win.reset()
	w.mu.Unlock()
	w.t.Logf("%s: endpoints sampler: %d samples (%d more without a member list), %d with a learner %v; round-robin client: %d operations, %d succeeded, other errors %v",
		step, win.Samples, win.Unknown, win.LearnerSamples, slices.Sorted(maps.Keys(win.Learners)), win.Ops, win.OK, win.Other)
	if win.LearnerSamples > 0 {
		w.t.Errorf("%s: %d samples saw learners %v: no member may join as one", step, win.LearnerSamples, slices.Sorted(maps.Keys(win.Learners)))
	}
	if win.Violations > 0 || win.Refused > 0 {
		w.t.Errorf("%s: a learner among the ready endpoints %d times, refusing the client %d times", step, win.Violations, win.Refused)
	}
	if win.Samples == 0 || win.Ops == 0 {
		w.t.Errorf("%s: %d samples read the member list and the client made %d operations: nothing was checked", step, win.Samples, win.Ops)
	}
}

// check judges the window that ends now. A window must have read the
// membership and seen a learner, or it checked nothing.
func (w *servingWatch) check(step string) servingWindow {
	w.t.Helper()
	w.mu.Lock()
	win := w.win
	w.win.reset()
	w.mu.Unlock()
	w.t.Logf("%s: endpoints sampler: %d samples (%d more without a member list), %d with a learner %v, %d with a learner's Pod Ready",
		step, win.Samples, win.Unknown, win.LearnerSamples, slices.Sorted(maps.Keys(win.Learners)), win.ReadyLearnerSamples)
	w.t.Logf("%s: round-robin client: %d operations on %d addresses, %d succeeded, %d refused by a learner, other errors %v, no ready endpoint %d times",
		step, win.Ops, len(win.Addresses), win.OK, win.Refused, win.Other, win.NoEndpoint)
	if win.Violations > 0 {
		w.t.Errorf("%s: %d samples had a learner among the client Service's ready endpoints, e.g.:\n%s",
			step, win.Violations, strings.Join(win.Examples, "\n"))
	}
	if win.Refused > 0 {
		w.t.Errorf("%s: a learner refused the round-robin client %d times, e.g.:\n%s",
			step, win.Refused, strings.Join(win.RefusedExamples, "\n"))
	}
	if win.Samples == 0 {
		w.t.Errorf("%s: no sample read etcd's member list: the endpoints were never checked", step)
	} else if win.LearnerSamples == 0 {
		w.t.Errorf("%s: no sample saw a learner in %d samples: the step checked nothing", step, win.Samples)
	}
	if win.Ops == 0 {
		w.t.Errorf("%s: the round-robin client made no operation", step)
	}
	return win
}

func (w *servingWatch) sampleLoop(ctx context.Context) {
	var cli *clientv3.Client
	var urls []string
	defer func() {
		if cli != nil {
			_ = cli.Close()
		}
	}()
	for ctx.Err() == nil {
		next := time.Now().Add(servingSamplePause)
		// The endpoints before the membership: a learner is only ever
		// promoted, and a member name is never reused, so a member etcd
		// lists as a learner after the endpoints were read was a learner
		// when they were read. The other order would blame a learner
		// promoted, and its Pod labelled, in between.
		at := time.Now()
		eps := harness.ServiceEndpoints(w.c.Env.API, w.c.Namespace, w.c.clientServiceName())
		pods := w.c.Pods()
		if now := w.c.MemberURLs(); !slices.Equal(now, urls) && len(now) > 0 {
			if cli != nil {
				_ = cli.Close()
			}
			urls, cli = now, nil
			if c, err := NewClient(urls...); err == nil {
				cli = c
			}
		}
		var members []*etcdserverpb.Member
		if cli != nil {
			members = memberListAnyVoter(ctx, cli, len(urls))
		}
		if ctx.Err() != nil {
			return
		}
		w.record(at, eps, pods, members)
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(next)):
		}
	}
}

// memberListAnyVoter reads etcd's member list linearizably, so that a
// member the leader has promoted is not listed a learner still. The
// client's balancer takes the next member on each try: a learner refuses
// the call.
func memberListAnyVoter(ctx context.Context, cli *clientv3.Client, tries int) []*etcdserverpb.Member {
	for range tries + 1 {
		mctx, cancel := context.WithTimeout(ctx, servingMemberListTimeout)
		resp, err := cli.MemberList(mctx)
		cancel()
		if err == nil {
			return resp.Members
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

func (w *servingWatch) record(at time.Time, eps []harness.Endpoint, pods []Pod, members []*etcdserverpb.Member) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if members == nil {
		w.win.Unknown++
		return
	}
	w.win.Samples++
	learners := map[string]bool{}
	for _, m := range members {
		if m.IsLearner {
			learners[memberPodName(m)] = true
			w.win.Learners[memberPodName(m)] = true
		}
	}
	if len(learners) == 0 {
		return
	}
	w.win.LearnerSamples++
	for _, p := range pods {
		if learners[p.Name] && p.Ready && !p.Terminating {
			w.win.ReadyLearnerSamples++
			break
		}
	}
	var ready []string
	bad := false
	for _, ep := range eps {
		ready = append(ready, ep.Pod)
		bad = bad || learners[ep.Pod]
	}
	if !bad {
		return
	}
	w.win.Violations++
	// The first sample of each situation: a learner stays in the
	// endpoints for many samples in a row.
	seen := fmt.Sprintf("ready endpoints %v, learners %v", ready, slices.Sorted(maps.Keys(learners)))
	if seen != w.win.lastExample && len(w.win.Examples) < servingExamples {
		w.win.Examples = append(w.win.Examples, fmt.Sprintf("sample at %s: %s (etcd: %s)", at.Format("15:04:05.000"), seen, DescribeMembers(members)))
		w.win.lastExample = seen
	}
}

// memberPodName is the Pod a member runs in. A member added and not
// started yet has no name in etcd's list, but its peer URL's first DNS
// label is its Pod's name.
func memberPodName(m *etcdserverpb.Member) string {
	if m.Name != "" || len(m.PeerURLs) == 0 {
		return memberName(m)
	}
	u, err := url.Parse(m.PeerURLs[0])
	if err != nil {
		return memberName(m)
	}
	host, _, _ := strings.Cut(u.Hostname(), ".")
	return host
}

// roundRobin dials the client Service's ready endpoints in turn, one
// address per operation and a connection per address, as kube-proxy
// spreads an application's connections. clientv3 with the Service's name
// would hide a learner's refusal of a read behind a retry on another
// member; one address each cannot.
func (w *servingWatch) roundRobin(ctx context.Context) {
	clients := map[netip.Addr]*clientv3.Client{}
	defer func() {
		for _, cli := range clients {
			_ = cli.Close()
		}
	}()
	for n := 0; ctx.Err() == nil; n++ {
		eps := harness.ServiceEndpoints(w.c.Env.API, w.c.Namespace, w.c.clientServiceName())
		for ip, cli := range clients {
			if !slices.ContainsFunc(eps, func(ep harness.Endpoint) bool { return ep.IP == ip }) {
				_ = cli.Close()
				delete(clients, ip)
			}
		}
		if len(eps) == 0 {
			w.mu.Lock()
			w.win.NoEndpoint++
			w.mu.Unlock()
		} else {
			ep := eps[n%len(eps)]
			cli, ok := clients[ep.IP]
			if !ok {
				// The harness' clusters here are plain: TLS would need
				// the Service's name as the server name.
				c, err := NewClient("http://" + netip.AddrPortFrom(ep.IP, 2379).String())
				if err != nil {
					continue
				}
				cli, clients[ep.IP] = c, c
			}
			key := fmt.Sprintf("/serving/round-robin/%08d", n)
			pctx, cancel := context.WithTimeout(ctx, putTimeout)
			_, err := cli.Put(pctx, key, ep.Pod)
			cancel()
			w.op(ctx, ep, "put", err)
			gctx, cancel := context.WithTimeout(ctx, putTimeout)
			_, err = cli.Get(gctx, key)
			cancel()
			w.op(ctx, ep, "linearizable get", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(roundRobinPause):
		}
	}
}

func (w *servingWatch) op(ctx context.Context, ep harness.Endpoint, what string, err error) {
	if ctx.Err() != nil {
		// Cut short by the end of the watch, not by etcd.
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.win.Ops++
	w.win.Addresses[ep.IP.String()] = true
	switch {
	case err == nil:
		w.win.OK++
	case strings.Contains(err.Error(), learnerRefusal):
		w.win.Refused++
		if len(w.win.RefusedExamples) < servingExamples {
			w.win.RefusedExamples = append(w.win.RefusedExamples, fmt.Sprintf("%s: %s via %s (%s): %v",
				time.Now().Format("15:04:05.000"), what, ep.Pod, ep.IP, err))
		}
	default:
		w.win.Other[errorKind(err)]++
	}
}

// errorKind names an error for the counts: etcd's own message, or the
// gRPC code of a transport's or a deadline's.
func errorKind(err error) string {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "DeadlineExceeded"
	}
	if st, ok := status.FromError(err); ok {
		if st.Code() == codes.Unknown {
			return st.Message()
		}
		return st.Code().String()
	}
	return err.Error()
}

// servingLabel is the label the client Service selects besides the
// cluster's own: the hook's mark of a voting member that has caught up.
const servingLabel = "etcd.database.coreos.com/serving"

// A cluster that an earlier release rendered (its Pods without the serving
// label, its client Service selecting every member Pod) is adopted in
// place: the Pods get the label with no restart and no membership change,
// and the client Service switches to it only once a ready Pod carries it,
// so it never has no endpoint, whatever order Metacontroller applies the
// answer's children in (the worst is taken). Every change the API server makes is
// judged as it happens, not sampled: a window between the Service's
// switch and the Pods' labels lasts milliseconds.
func TestClusterOfAnEarlierReleaseIsAdopted(t *testing.T) {
	// Services before Pods: the order in which switching the Service in
	// the answer that first labels the Pods would leave it no endpoint.
	s := newFaultScenario(t, harness.Options{Controller: harness.ControllerConfig{ApplyOrder: []string{"Service.v1"}}})
	s.createSpec("setup", map[string]any{"size": 3, "version": faultVersion})
	s.startWriter("adoption")
	s.waitWrites(writesAround)
	before := s.world(s.c.PodNames())
	restarts := map[string]int32{}
	for _, p := range s.c.Pods() {
		restarts[p.Name] = p.Restarts
	}
	logged := len(s.loggedActions())

	// The hook is held while the children are made an earlier release's,
	// the Service first, so that clients are never cut off meanwhile.
	release := s.env.Proxy.Inject(harness.Fault{Path: "/sync", Parent: ns + "/" + exampleName, Status: http.StatusServiceUnavailable})
	s.waitHeld()
	svc := harness.Ref{Type: harness.TypeService, Namespace: ns, Name: s.c.clientServiceName()}
	s.earlierRelease(svc, func(o harness.Object) {
		sel, _ := o["spec"].(map[string]any)["selector"].(map[string]any)
		delete(sel, servingLabel)
	})
	for _, name := range s.c.PodNames() {
		s.earlierRelease(harness.Ref{Type: harness.TypePod, Namespace: ns, Name: name}, func(o harness.Object) {
			labels, _ := o["metadata"].(map[string]any)["labels"].(map[string]any)
			delete(labels, servingLabel)
		})
	}
	if eps := harness.ServiceEndpoints(s.env.API, ns, svc.Name); len(eps) != 3 {
		t.Fatalf("an earlier release's client Service has endpoints %v, want the 3 members", eps)
	}
	// A sync that read the children halfway through the edits is refused
	// too: only what an earlier release left, as a whole, is adopted.
	s.waitHeld()

	var mu sync.Mutex
	var changes, empty int
	var emptyAt []string
	unsub := s.env.API.Subscribe(func(ev harness.Event) {
		eps := harness.ServiceEndpoints(s.env.API, ns, svc.Name)
		mu.Lock()
		defer mu.Unlock()
		changes++
		if len(eps) == 0 {
			empty++
			if len(emptyAt) < servingExamples {
				emptyAt = append(emptyAt, fmt.Sprintf("%s after %s %s %s", time.Now().Format("15:04:05.000"), ev.Type, ev.Ref.Type, ev.Ref.Name))
			}
		}
	})
	defer unsub()
	start := time.Now()
	release()
	err := s.env.WaitFor(convergeTimeout, "the client Service selects the serving label and every member Pod carries it", func() (bool, string) {
		obj, _ := s.env.API.Get(svc)
		sel, _ := obj["spec"].(map[string]any)["selector"].(map[string]any)
		var unlabelled []string
		for _, name := range s.c.PodNames() {
			pod, _ := s.env.API.Get(harness.Ref{Type: harness.TypePod, Namespace: ns, Name: name})
			if labels, _ := pod["metadata"].(map[string]any)["labels"].(map[string]any); labels[servingLabel] != "true" {
				unlabelled = append(unlabelled, name)
			}
		}
		return sel[servingLabel] == "true" && len(unlabelled) == 0, fmt.Sprintf("selector %v, Pods without the label %v", sel, unlabelled)
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	s.waitWrites(writesAround)
	unsub()
	mu.Lock()
	t.Logf("adopted in %s; the client Service's endpoints judged at %d API changes", round(took), changes)
	if empty > 0 {
		t.Errorf("the client Service had no ready endpoint after %d of %d API changes during the adoption, e.g.:\n%s", empty, changes, strings.Join(emptyAt, "\n"))
	}
	mu.Unlock()
	s.checkWorld("adoption", before, s.c.PodNames())
	s.checkNoMembershipChange("adoption", logged)
	for _, p := range s.c.Pods() {
		if p.Restarts != restarts[p.Name] {
			t.Errorf("adoption: member %s restarted (%d restarts, %d before)", p.Name, p.Restarts, restarts[p.Name])
		}
	}
	s.verifyWrites("adoption")
}

// waitHeld returns once a sync has been refused since the hook was held:
// one parent is never synced twice at once, so no sync that started
// before is still to apply its answer.
func (s *scenario) waitHeld() {
	s.t.Helper()
	since := time.Now()
	s.env.MC.Enqueue(ns, exampleName)
	err := s.env.WaitFor(convergeTimeout, "a sync refused", func() (bool, string) {
		for _, r := range s.env.MC.Records(ns, exampleName) {
			if r.Start.After(since) && r.HTTPStatus == http.StatusServiceUnavailable {
				return true, ""
			}
		}
		return false, "no sync refused yet"
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// earlierRelease edits a child, and what Metacontroller recorded as last
// applied to it, the same way: as an earlier hook release rendered it.
func (s *scenario) earlierRelease(ref harness.Ref, edit func(harness.Object)) {
	s.t.Helper()
	_, err := s.env.API.Mutate(ref, func(o harness.Object) error {
		edit(o)
		annotations, _ := o["metadata"].(map[string]any)["annotations"].(map[string]any)
		raw, _ := annotations[harness.AnnotationLastApplied].(string)
		var applied harness.Object
		if err := json.Unmarshal([]byte(raw), &applied); err != nil {
			return fmt.Errorf("%s has no last applied configuration: %w", ref, err)
		}
		edit(applied)
		out, err := json.Marshal(applied)
		if err != nil {
			return err
		}
		annotations[harness.AnnotationLastApplied] = string(out)
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
}
