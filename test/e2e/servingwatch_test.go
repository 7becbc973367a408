package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
