package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

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
