package etcdcluster

import (
	"github.com/etcdhook/etcd-hook/plan"
	corev1 "k8s.io/api/core/v1"
)

// Which member Pods take client traffic.
//
// The client Service sends clients to ready Pods, and a Pod is ready once
// its etcd answers a serializable read: a learner does as soon as it
// starts. But a learner refuses every write and every linearizable read
// ("etcdserver: rpc not supported for learner"), so a client that the
// Service sent to one would fail. The client Service therefore selects
// LabelServing as well, which the hook sets on a member Pod once etcd has
// said, in a sync, that the member is a voting member that has caught up
// with the leader.
//
// Why a label rather than a readiness check that a learner fails (etcd's
// /readyz/non_learner):
//   - it holds on every release the hook runs: etcd's /readyz arrived in
//     3.5.11 and its non_learner check only in 3.5.19 and 3.6.0; before
//     3.4 there are no learners at all, yet a voter added there still
//     starts empty and catches up;
//   - it also keeps out a member that has been promoted but not yet seen
//     caught up, which no probe of the member alone can tell;
//   - a running cluster takes it up in place, with no restart: a probe
//     cannot change on a running Pod, and every member would roll;
//   - readiness stays what it was: the headless peer Service still
//     publishes every member, ready or not, so a learner still gets its
//     peer traffic and the hook's calls, and no probe ever restarts a
//     member.
//
// The label follows etcd's membership as read in the sync, and is never
// taken off on a guess:
//   - a learner, or a member that has not started, has none;
//   - a voter gets it once it has caught up with the leader (the leader
//     itself has), and keeps it;
//   - the only voter of a cluster has it from its first start: its data is
//     the cluster's, so there is nothing to catch up with;
//   - when the membership could not be read, or was read from one member
//     without a quorum, every Pod keeps what it has.
//
// A new Pod for any other member starts without the label, so a member
// restarted on its claim is seen caught up before clients reach it.

// servingMembers decides LabelServing for each member whose role this
// sync's membership proves; those left out keep what their Pod has.
func (p *planner) servingMembers(views []memberView) map[string]bool {
	out := map[string]bool{}
	ms := p.o.Membership
	if ms.Stale {
		return out
	}
	leader := p.leaderView(views)
	voters := ms.VoterCount()
	for _, v := range views {
		switch {
		case v.IsLearner || !v.Started():
			out[v.name] = false
		case voters == 1:
			out[v.name] = true
		case leader.ID != 0 && v.ID == leader.ID && v.Reachable:
			out[v.name] = true
		case caughtUp(v.Member, leader.Member):
			out[v.name] = true
		}
	}
	return out
}

// servingPod says whether an observed member Pod keeps, gets or loses
// LabelServing in this answer.
func (p *planner) servingPod(pod *corev1.Pod) bool {
	if serving, known := p.serving[pod.Name]; known {
		return serving
	}
	return pod.Labels[LabelServing] == "true"
}

// selectServingOnly says whether the client Service selects LabelServing.
// A cluster that ran under an earlier hook release has a client Service
// that selects every member Pod, and Pods without the label. Were the
// Service to select the label in the same answer that first labels the
// Pods, it could select none for a moment (Metacontroller applies children
// one by one, and the endpoints follow each change): so it switches only
// once a ready Pod is seen to carry the label. A new cluster selects it
// from the start, and a Service that selects it keeps doing so.
func (p *planner) selectServingOnly() bool {
	svc := p.o.Services[plan.ClientServiceName(p.o.Cluster.Name)]
	if svc == nil {
		return true
	}
	if _, ok := svc.Spec.Selector[LabelServing]; ok {
		return true
	}
	for _, pod := range p.o.Pods {
		if pod.Labels[LabelServing] == "true" && podReady(pod) {
			return true
		}
	}
	return false
}
