package etcdcluster

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// labelled is an observed member Pod that carries LabelServing, in its
// labels and in what Metacontroller last applied.
func labelled(p *corev1.Pod) *corev1.Pod {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[LabelServing] = "true"
	applied, _ := podObject(plan.KeepPod(p))
	applied.Labels = map[string]string{LabelServing: "true"}
	raw, _ := json.Marshal(applied)
	p.Annotations[plan.LastAppliedAnnotation] = string(raw)
	return p
}

// servingOutcome is what the client Service offers after an answer: the
// member Pods carrying LabelServing, and whether its selector asks for it.
type servingOutcome struct {
	Serving         []string
	SelectorServing bool
}

func servingOutcomeOf(d Decision) servingOutcome {
	var out servingOutcome
	for _, c := range d.Children {
		switch c.Kind {
		case plan.KindPod:
			if pod, ok := podObject(c); ok && pod.Labels[LabelServing] == "true" {
				out.Serving = append(out.Serving, c.Name)
			}
		case plan.KindService:
			if svc, ok := c.Object.(*corev1.Service); ok && c.Name == plan.ClientServiceName(testCluster) {
				_, out.SelectorServing = svc.Spec.Selector[LabelServing]
			}
		}
	}
	slices.Sort(out.Serving)
	return out
}

func TestServingLabel(t *testing.T) {
	m1, m2, m3, m4 := name(1), name(2), name(3), name(4)
	three := func(o *Observed) {
		for _, n := range []string{m1, m2, m3} {
			o.Pods[n] = labelled(readyPod(n))
		}
		o.Membership = memberList(1, member(1, m1), member(2, m2), member(3, m3))
		o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, true)
	}
	withLearner := func(raftIndex uint64) func(*Observed) {
		return func(o *Observed) {
			o.Pods[m4] = readyPod(m4)
			o.Membership.Members = append(o.Membership.Members, learner(4, m4, raftIndex))
		}
	}
	cases := []struct {
		name, reason string
		size         int
		version      string
		edits        []func(*Observed)
		want         servingOutcome
	}{{
		name:   "new cluster",
		reason: "the seed is the whole cluster: it takes clients from its first start, and the new client Service selects the label",
		size:   3,
		want:   servingOutcome{Serving: []string{firstSeed}, SelectorServing: true},
	}, {
		name:   "converged",
		reason: "every voter has caught up: all three serve",
		size:   3, edits: []func(*Observed){three},
		want: servingOutcome{Serving: []string{m1, m2, m3}, SelectorServing: true},
	}, {
		name:   "ready learner",
		reason: "a learner refuses writes and linearizable reads, so its Pod never carries the label, ready or not",
		size:   4, edits: []func(*Observed){three, withLearner(100)},
		want: servingOutcome{Serving: []string{m1, m2, m3}, SelectorServing: true},
	}, {
		name:   "promoted, caught up",
		reason: "the answer to the sync that promoted a caught-up learner labels it at once",
		size:   4, edits: []func(*Observed){three, withLearner(100), func(o *Observed) {
			o.Membership.Members[3].IsLearner = false
			o.Acted = &Outcome{Action: membership.Action{Type: membership.ActionPromoteMember, Name: m4, MemberID: 4, Step: ReasonPromotingLearner}}
		}},
		want: servingOutcome{Serving: []string{m1, m2, m3, m4}, SelectorServing: true},
	}, {
		name:   "promoted, behind",
		reason: "a voter more than a moment's writes behind the leader gets no clients until it is seen caught up",
		size:   4, edits: []func(*Observed){three, withLearner(100), func(o *Observed) {
			o.Membership.Members[0].RaftIndex = 5000
			o.Membership.Members[3].IsLearner = false
			o.Membership.Members[3].RaftIndex = 3000
		}},
		want: servingOutcome{Serving: []string{m1, m2, m3}, SelectorServing: true},
	}, {
		name:   "labelled voter falls behind",
		reason: "a voter keeps the label while it lags: a busy leader is always a little ahead, and endpoints must not flap",
		size:   3, edits: []func(*Observed){three, func(o *Observed) {
			o.Membership.Members[0].RaftIndex = 5000
		}},
		want: servingOutcome{Serving: []string{m1, m2, m3}, SelectorServing: true},
	}, {
		name:   "voter not yet started",
		reason: "below 3.4 a member joins as a voter, empty: it gets no clients until it has run and caught up",
		size:   4, version: "3.3.27", edits: []func(*Observed){three, func(o *Observed) {
			o.Pods[m4] = memberPod(m4, corev1.PodPending, false)
			o.Membership.Members = append(o.Membership.Members, unstarted(4, m4, false))
		}},
		want: servingOutcome{Serving: []string{m1, m2, m3}, SelectorServing: true},
	}, {
		name:   "stale membership",
		reason: "a membership read without a quorum proves no role: every Pod keeps what it has, the learner included",
		size:   4, edits: []func(*Observed){three, withLearner(100), func(o *Observed) {
			labelled(o.Pods[m4])
			o.Membership.Stale = true
		}},
		want: servingOutcome{Serving: []string{m1, m2, m3, m4}, SelectorServing: true},
	}, {
		name:   "etcd unreachable",
		reason: "without a membership every Pod is kept as it was applied",
		size:   3, edits: []func(*Observed){three, func(o *Observed) {
			o.Pods[m3] = readyPod(m3)
			o.Membership, o.MembershipError = nil, "context deadline exceeded"
			servicesLeft(o)
		}},
		want: servingOutcome{Serving: []string{m1, m2}, SelectorServing: true},
	}, {
		name:   "running cluster of an earlier release",
		reason: "Pods of an earlier hook are labelled in place, but the client Service keeps selecting every member until a ready Pod is seen with the label: switching in the same answer could leave it no endpoint for a moment",
		size:   3, edits: []func(*Observed){three, func(o *Observed) {
			for _, n := range []string{m1, m2, m3} {
				o.Pods[n] = readyPod(n)
			}
			o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, false)
		}},
		want: servingOutcome{Serving: []string{m1, m2, m3}, SelectorServing: false},
	}, {
		name:   "earlier release, Pods labelled",
		reason: "once a ready Pod carries the label, the client Service selects it",
		size:   3, edits: []func(*Observed){three, func(o *Observed) {
			o.Pods[m2], o.Pods[m3] = readyPod(m2), readyPod(m3)
			o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, false)
		}},
		want: servingOutcome{Serving: []string{m1, m2, m3}, SelectorServing: true},
	}, {
		name:   "restore verifying",
		reason: "the seed of a restore not yet committed runs another etcd cluster than the one clients use: its Pod gets no label, so even a seed that started while the hook was down takes no client",
		size:   3, edits: []func(*Observed){runningThree, etcdRestore()},
		want: servingOutcome{Serving: []string{m1, m2, m3}, SelectorServing: true},
	}, {
		name:   "only voter back on its claim",
		reason: "a single member's Pod rendered again on its claim is the whole cluster: it serves from its first start",
		size:   1, edits: []func(*Observed){persistent, func(o *Observed) {
			o.PVCs[m1] = claimOf(m1, false)
			o.Membership = memberList(1, down(member(1, m1)))
			o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, true)
		}},
		want: servingOutcome{Serving: []string{m1}, SelectorServing: true},
	}, {
		name:   "voter back on its claim",
		reason: "a member of three rendered again on its claim waits to be seen caught up",
		size:   3, edits: []func(*Observed){persistent, three, func(o *Observed) {
			delete(o.Pods, m3)
			o.PVCs[m3] = claimOf(m3, false)
			o.Membership.Members[2] = down(o.Membership.Members[2])
		}},
		want: servingOutcome{Serving: []string{m1, m2}, SelectorServing: true},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			version := tc.version
			if version == "" {
				version = "3.6.16"
			}
			o := apply(observed(newCluster(tc.size, version)), tc.edits...)
			got := servingOutcomeOf(Plan(o))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// TestServingLabelIsTheHooks: spec.pod.labels cannot put a learner in
// the client Service: validation refuses the key, and the hook's own
// value wins if it gets through.
func TestServingLabelIsTheHooks(t *testing.T) {
	policy := &v1beta2.PodPolicy{Labels: map[string]string{LabelServing: "true", "team": "a"}}
	got := memberLabels(testCluster, name(4), policy, false)
	want := map[string]string{LabelApp: "etcd", LabelCluster: testCluster, LabelNode: name(4), "team": "a"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a learner's labels (-want +got):\n%s", diff)
	}
	c := newCluster(3, "3.6.16")
	c.Spec.Pod = policy
	if errs := c.Validate(); len(errs) == 0 {
		t.Errorf("spec.pod.labels[%s] was accepted", LabelServing)
	}
}
