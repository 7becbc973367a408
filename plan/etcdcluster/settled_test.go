package etcdcluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

func TestSettled(t *testing.T) {
	three := func() *Observed {
		o := observed(newCluster(3, "3.6.16"), readyPod(name(0)), readyPod(name(1)), readyPod(name(2)))
		o.Cluster.Status.Phase = v1beta2.PhaseRunning
		o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), member(3, name(2)))
		return o
	}
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   bool
	}{{
		name:   "steady",
		reason: "a converged cluster changes nothing, so a local list is enough",
		in:     three(),
		want:   true,
	}, {
		name:   "paused",
		reason: "a frozen cluster keeps every child and takes no step",
		in: with(three(), func(o *Observed) {
			o.Cluster.Spec.Paused = true
			o.Cluster.Spec.Size = 5
		}),
		want: true,
	}, {
		name:   "grow",
		reason: "a membership step is decided on the list read through the quorum",
		in:     with(three(), func(o *Observed) { o.Cluster.Spec.Size = 5 }),
		want:   false,
	}, {
		name:   "member without a Pod",
		reason: "a Pod to create for a listed member must not rest on a list that may lag a removal",
		in:     with(three(), func(o *Observed) { delete(o.Pods, name(2)) }),
		want:   false,
	}, {
		name:   "Pod without a member",
		reason: "a Pod to drop must not rest on a list that may lag an addition",
		in: with(three(), func(o *Observed) {
			o.Pods[name(3)] = memberPod(name(3), corev1.PodRunning, false)
			o.Cluster.Spec.Size = 3
		}),
		want: false,
	}, {
		name:   "learner catching up",
		reason: "a cluster on its way to the spec is progressing, even when this sync takes no step",
		in: with(three(), func(o *Observed) {
			o.Cluster.Spec.Size = 4
			o.Membership.Members = append(o.Membership.Members, learner(4, name(3), 1))
			o.Pods[name(3)] = readyPod(name(3))
		}),
		want: false,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Plan(tt.in).Settled(tt.in); got != tt.want {
				t.Errorf("%s: Settled = %v, want %v", tt.reason, got, tt.want)
			}
		})
	}
}
