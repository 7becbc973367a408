package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// annotationPodSpecHash is the annotation on every member Pod naming what
// it was rendered from (sync.AnnotationPodSpecHash, spelled out here: the
// scenarios judge the wire, not the hook's packages).
const annotationPodSpecHash = "etcd.database.coreos.com/pod-spec-hash"

// MemberPod is a member Pod as a rolling spec change is judged by.
type MemberPod struct {
	Name        string
	UID         string
	Ready       bool
	Terminating bool
	Restarts    int32
	Labels      map[string]string
	SpecHash    string
	// Requests are the etcd container's resource requests, as strings.
	Requests map[string]string
}

// MemberPods maps the cluster's member Pods, terminating ones included, by
// name.
func (c *Cluster) MemberPods() map[string]MemberPod {
	out := map[string]MemberPod{}
	for _, obj := range c.Env.API.List(harness.TypePod, c.Namespace) {
		var p corev1.Pod
		data, err := json.Marshal(obj)
		if err != nil || json.Unmarshal(data, &p) != nil || p.Labels["etcd_cluster"] != c.Name {
			continue
		}
		mp := MemberPod{Name: p.Name, UID: string(p.UID), Ready: harness.IsPodReady(obj), Terminating: p.DeletionTimestamp != nil,
			Labels: p.Labels, SpecHash: p.Annotations[annotationPodSpecHash], Requests: map[string]string{}}
		for _, cs := range p.Status.ContainerStatuses {
			mp.Restarts += cs.RestartCount
		}
		for _, ctr := range p.Spec.Containers {
			if ctr.Name != "etcd" {
				continue
			}
			for name, q := range ctr.Resources.Requests {
				mp.Requests[string(name)] = q.String()
			}
		}
		out[p.Name] = mp
	}
	return out
}

// serving: the Pod is Ready and not on its way out.
func (p MemberPod) serving() bool { return p.Ready && !p.Terminating }

// RolloutSample is the cluster at one instant of a rolling change: its
// Pods, and etcd's membership and leader as the members answered.
type RolloutSample struct {
	At   time.Time
	Pods map[string]MemberPod
	// Voters and Learners are started members by name, from the leader's
	// own member list (another member's when the leader did not answer);
	// Known is false when no member answered at all.
	Known    bool
	Voters   []string
	Learners []string
	// Unstarted counts members added and not started yet.
	Unstarted int
	Leader    string
	// Answering are the members whose etcd answered Status.
	Answering []string
}

// ReadyVoters are the voters whose Pod is Ready and not terminating.
func (s RolloutSample) ReadyVoters() []string {
	var out []string
	for _, v := range s.Voters {
		if p, ok := s.Pods[v]; ok && p.serving() {
			out = append(out, v)
		}
	}
	return out
}

// AnsweringReadyVoters are ReadyVoters whose etcd also answered Status in
// this sample.
func (s RolloutSample) AnsweringReadyVoters() []string {
	var out []string
	for _, v := range s.ReadyVoters() {
		if slices.Contains(s.Answering, v) {
			out = append(out, v)
		}
	}
	return out
}

func (s RolloutSample) String() string {
	var pods []string
	for _, name := range slices.Sorted(maps.Keys(s.Pods)) {
		p := s.Pods[name]
		state := "ready"
		switch {
		case p.Terminating:
			state = "terminating"
		case !p.Ready:
			state = "unready"
		}
		pods = append(pods, fmt.Sprintf("%s(%s %s)", name, shortUID(p.UID), state))
	}
	return fmt.Sprintf("%s pods [%s] voters %v learners %v unstarted %d leader %s", s.At.Format("15:04:05.000"),
		strings.Join(pods, " "), s.Voters, s.Learners, s.Unstarted, s.Leader)
}

func shortUID(uid string) string {
	if len(uid) > 8 {
		return uid[:8]
	}
	return uid
}

// SpecRolloutWatch samples the cluster continuously (a sample takes one
// Status and one serializable MemberList per serving member, in parallel,
// then reads the Pods; samplePause apart) so that a scenario can check after
// the fact that no instant of a rolling change had two members out.
type SpecRolloutWatch struct {
	c      *Cluster
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	samples []RolloutSample
}

// samplePause separates samples; a sample itself takes a few milliseconds,
// up to sampleTimeout when a member does not answer.
const (
	samplePause   = 50 * time.Millisecond
	sampleTimeout = 200 * time.Millisecond
)

// WatchSpecRollout starts sampling; Stop ends it.
func WatchSpecRollout(ctx context.Context, c *Cluster) *SpecRolloutWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &SpecRolloutWatch{c: c, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx)
	return w
}

// sampleClient is a kept connection to one Pod's etcd; a Pod recreated
// under the same name gets a new one.
type sampleClient struct {
	uid string
	cli *clientv3.Client
	m   clientv3.Maintenance
}

func (w *SpecRolloutWatch) run(ctx context.Context) {
	defer close(w.done)
	clients := map[string]*sampleClient{}
	defer func() {
		for _, sc := range clients {
			_ = sc.cli.Close()
		}
	}()
	for {
		stopped := ctx.Err() != nil
		sctx := ctx
		if stopped {
			// One more sample once stopped: the world as the scenario
			// saw it finished.
			sctx = context.WithoutCancel(ctx)
		}
		s := w.sample(sctx, clients)
		w.mu.Lock()
		w.samples = append(w.samples, s)
		w.mu.Unlock()
		if stopped {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(samplePause):
		}
	}
}

func (w *SpecRolloutWatch) sample(ctx context.Context, clients map[string]*sampleClient) RolloutSample {
	pods := w.c.MemberPods()
	for name, sc := range clients {
		if p, ok := pods[name]; !ok || p.UID != sc.uid {
			_ = sc.cli.Close()
			delete(clients, name)
		}
	}
	type answer struct {
		pod     string
		status  *clientv3.StatusResponse
		members *clientv3.MemberListResponse
	}
	answers := make(chan answer, len(pods))
	asked := 0
	for name, p := range pods {
		if !p.serving() {
			// Not counted as a ready voter whatever its etcd says; asking
			// a stopped one would only hold the sample up.
			continue
		}
		sc, ok := clients[name]
		if !ok {
			cli, err := NewClient(w.c.MemberURL(name))
			if err != nil {
				continue
			}
			sc = &sampleClient{uid: p.UID, cli: cli, m: clientv3.NewMaintenanceFromMaintenanceClient(etcdserverpb.NewMaintenanceClient(cli.ActiveConnection()), cli)}
			clients[name] = sc
		}
		asked++
		go func() {
			sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
			defer cancel()
			a := answer{pod: name}
			if st, err := sc.m.Status(sctx, ""); err == nil && st.Header != nil {
				a.status = st
				if ml, err := sc.cli.MemberList(sctx, clientv3.WithSerializable()); err == nil {
					a.members = ml
				}
			}
			answers <- a
		}()
	}
	var list *clientv3.MemberListResponse
	var leaderID uint64
	var answering []string
	for range asked {
		a := <-answers
		if a.status == nil {
			continue
		}
		answering = append(answering, a.pod)
		self := a.status.Leader == a.status.Header.MemberId
		if leaderID == 0 || self {
			leaderID = a.status.Leader
		}
		if a.members != nil && (list == nil || self) {
			list = a.members
		}
	}
	s := RolloutSample{At: time.Now(), Answering: sorted(answering)}
	if list != nil {
		s.Known = true
		for _, m := range list.Members {
			switch {
			case m.Name == "":
				s.Unstarted++
			case m.IsLearner:
				s.Learners = append(s.Learners, m.Name)
			default:
				s.Voters = append(s.Voters, m.Name)
			}
			if m.ID == leaderID {
				s.Leader = m.Name
			}
		}
		slices.Sort(s.Voters)
		slices.Sort(s.Learners)
	}
	// The Pods last: a Pod is dropped, or made, only after etcd's
	// membership allows it, so membership then Pods never shows a member
	// out that was not.
	s.Pods = w.c.MemberPods()
	return s
}

// Stop ends the sampling and returns the samples.
func (w *SpecRolloutWatch) Stop() []RolloutSample {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.samples)
}

// sampleSummary is what the samples of one rolling change add up to.
type sampleSummary struct {
	Samples int
	// MaxGap is the longest time between two samples.
	MaxGap time.Duration
	// MinReadyVoters is the fewest voters with a Ready Pod at any sample
	// (etcd's membership known), and MinAnswering the fewest of those that
	// also answered etcd's Status.
	MinReadyVoters, MinAnswering int
	MinAt                        RolloutSample
	MaxLearners, MaxMembers      int
}

func summarize(samples []RolloutSample) sampleSummary {
	sum := sampleSummary{Samples: len(samples), MinReadyVoters: -1, MinAnswering: -1}
	for i, s := range samples {
		if i > 0 {
			sum.MaxGap = max(sum.MaxGap, s.At.Sub(samples[i-1].At))
		}
		if !s.Known {
			continue
		}
		if n := len(s.ReadyVoters()); sum.MinReadyVoters < 0 || n < sum.MinReadyVoters {
			sum.MinReadyVoters, sum.MinAt = n, s
		}
		if n := len(s.AnsweringReadyVoters()); sum.MinAnswering < 0 || n < sum.MinAnswering {
			sum.MinAnswering = n
		}
		sum.MaxLearners = max(sum.MaxLearners, len(s.Learners)+s.Unstarted)
		sum.MaxMembers = max(sum.MaxMembers, len(s.Voters)+len(s.Learners)+s.Unstarted)
	}
	return sum
}

// podReplacement is one member's Pod replaced under the same name: when
// the old one was first seen leaving (terminating or gone) and when the
// new one was first seen serving.
type podReplacement struct {
	Name           string
	From, To       string // UIDs
	Left, Serving  time.Time
	LeaderAtLeave  string
	ServingAtLeave []string // the other Pods serving when it left
}

func (r podReplacement) String() string {
	return fmt.Sprintf("%s %s→%s left %s (leader %s, serving %v), new Pod serving %s", r.Name, shortUID(r.From), shortUID(r.To),
		r.Left.Format("15:04:05.000"), r.LeaderAtLeave, r.ServingAtLeave, r.Serving.Format("15:04:05.000"))
}

// podReplacements reads, from the samples, every change of a Pod's UID
// under the same name, in the order the old Pods left. uids are the Pods
// before the change.
func podReplacements(before map[string]MemberPod, samples []RolloutSample) (reps []podReplacement, uids map[string][]string) {
	uids = map[string][]string{}
	for name, p := range before {
		uids[name] = []string{p.UID}
	}
	open := map[string]*podReplacement{}
	for _, s := range samples {
		for name := range uids {
			p, ok := s.Pods[name]
			cur := uids[name][len(uids[name])-1]
			leaving := !ok || p.Terminating || p.UID != cur
			if r := open[name]; r == nil && leaving {
				var serving []string
				for other, op := range s.Pods {
					if other != name && op.serving() {
						serving = append(serving, other)
					}
				}
				open[name] = &podReplacement{Name: name, From: cur, Left: s.At, LeaderAtLeave: s.Leader, ServingAtLeave: sorted(serving)}
			}
			if ok && p.UID != cur && !p.Terminating {
				uids[name] = append(uids[name], p.UID)
				if r := open[name]; r != nil {
					r.To = p.UID
				}
			}
			if r := open[name]; r != nil && r.To != "" && ok && p.UID == r.To && p.serving() {
				r.Serving = s.At
				reps = append(reps, *r)
				delete(open, name)
			}
		}
	}
	for _, r := range open {
		reps = append(reps, *r)
	}
	slices.SortFunc(reps, func(a, b podReplacement) int { return a.Left.Compare(b.Left) })
	return reps, uids
}

// rolledOut checks the world against a finished rolling change: the
// cluster converged at size members, Progressing False, and every Pod on
// one spec hash other than oldHash, with the requests and the labels asked
// for.
func (c *Cluster) rolledOut(ctx context.Context, size int, oldHash string, requests, labels map[string]string) (bool, string) {
	if ok, why := c.Converged(ctx, size); !ok {
		return false, why
	}
	_, st, _ := c.Parent()
	if status, reason := st.Condition("Progressing"); status != "False" {
		return false, fmt.Sprintf("Progressing %s/%s %q", status, reason, st.ConditionMessage("Progressing"))
	}
	hash := ""
	for name, p := range c.MemberPods() {
		if hash == "" {
			hash = p.SpecHash
		}
		switch {
		case p.SpecHash == "" || p.SpecHash == oldHash || p.SpecHash != hash:
			return false, fmt.Sprintf("pod %s: spec hash %q (old %q, another Pod's %q)", name, p.SpecHash, oldHash, hash)
		case !maps.Equal(p.Requests, requests):
			return false, fmt.Sprintf("pod %s: etcd requests %v, want %v", name, p.Requests, requests)
		}
		for k, v := range labels {
			if p.Labels[k] != v {
				return false, fmt.Sprintf("pod %s: label %s=%q, want %q", name, k, p.Labels[k], v)
			}
		}
	}
	return true, ""
}

// RolloutFigure is one rolling change's line in the rolling-change table
// of BENCHMARKS.md.
type RolloutFigure struct {
	Scenario string
	// Wall runs from the change of spec to the first moment the world was
	// checked rolled out (every member on the new spec, converged).
	Wall time.Duration
	// Floor is what etcd alone needed for the restarts: Stops plus Starts.
	Floor time.Duration
	// Stops sums, for the members whose etcd had to stop before its
	// replacement could start (the same member on its claim), the time
	// from the SIGTERM etcd logged to its exit: etcd's own shutdown,
	// which a restart on the same data cannot skip. On emptyDir the old
	// member stops after its replacement serves, beside the next step,
	// and is not counted.
	Stops time.Duration
	// Starts sums the start-to-serving times of the new etcd processes:
	// serving is the later of the Pod turning Ready and etcd's own "ready
	// to serve client requests" (a learner that lost its first publish
	// serves seconds after its readiness probe passes).
	Starts   time.Duration
	Replaced int
	// Refused is etcd's refusals of the membership steps, as in Figure.
	Refused   time.Duration
	Acked     int
	Lost      int
	Syncs     int
	PeakSyncs int
}

// RolloutHeader is the rolling-change table's header.
const RolloutHeader = "| scenario | wall | floor (stops + starts) | ratio | etcd stops | etcd starts (n) | etcd refused | ratio to floor + refused | acknowledged | lost | hook calls (peak/s) |\n|---|---|---|---|---|---|---|---|---|---|---|\n"

// Line renders the figure as a table row.
func (f RolloutFigure) Line() string {
	withRefused := "-"
	if f.Floor > 0 {
		withRefused = ratio(f.Wall, f.Floor+f.Refused)
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s (%d) | %s | %s | %d | %d | %d (%d) |", f.Scenario, round(f.Wall), round(f.Floor),
		ratio(f.Wall, f.Floor), round(f.Stops), round(f.Starts), f.Replaced, round(f.Refused), withRefused, f.Acked, f.Lost, f.Syncs, f.PeakSyncs)
}

// rolloutReportEnv names the file the rolling-change table goes to (make
// bench). The header is written when the file is empty.
const rolloutReportEnv = "BENCH_ROLLOUT_FILE"

// reportRollout logs the figure and appends it to the rolling-change
// table when one is asked for.
func reportRollout(t testing.TB, f RolloutFigure) {
	t.Helper()
	appendTableLine(t, "rollouts", RolloutHeader, f.Line(), func() (string, error) {
		p, err := testenv.FromModuleRoot(os.Getenv(rolloutReportEnv))
		if err != nil || p == "" {
			return p, err
		}
		reportMu.Lock()
		defer reportMu.Unlock()
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			if err := os.WriteFile(p, []byte(RolloutHeader), 0o644); err != nil {
				return "", err
			}
		}
		return p, nil
	})
}

// firstIn is the first time in [from, to], zero if none.
func firstIn(times []time.Time, from, to time.Time) time.Time {
	for _, t := range times {
		if !t.Before(from) && !t.After(to) {
			return t
		}
	}
	return time.Time{}
}

// minTime is the earliest of the times after floor, for sorting a run that
// started before the window by its exit.
func minTime(started, exited, floor time.Time) time.Time {
	if started.Before(floor) && !exited.IsZero() {
		return exited
	}
	return started
}

// cmpRel orders timeline lines by their leading "+<n>ms".
func cmpRel(a, b string) int {
	var x, y int64
	fmt.Sscanf(a, "+%dms", &x)
	fmt.Sscanf(b, "+%dms", &y)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// progressingOf is the Progressing condition of a hook answer, for the
// timeline.
func progressingOf(response []byte) string {
	var ans struct {
		Status struct {
			Conditions []struct {
				Type, Status, Reason, Message string
			} `json:"conditions"`
		} `json:"status"`
	}
	if json.Unmarshal(response, &ans) != nil {
		return "(no answer)"
	}
	for _, c := range ans.Status.Conditions {
		if c.Type == "Progressing" {
			return fmt.Sprintf("%s/%s %s", c.Status, c.Reason, c.Message)
		}
	}
	return ""
}
