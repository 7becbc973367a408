package etcdcluster

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// summary is the part of a decision a lifecycle case is about.
type summary struct {
	Action      string
	Learner     bool
	Pods        []string
	Phase       v1beta2.ClusterPhase
	Progressing string
	Degraded    string
	Resync      bool
}

func summarize(d Decision) summary {
	s := summary{
		Pods:        podsIn(d.Children),
		Phase:       d.Status.Phase,
		Progressing: conditionOf(d.Status, v1beta2.ConditionProgressing).Reason,
		Resync:      d.ResyncAfter > 0,
	}
	if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Status == metav1.ConditionTrue {
		s.Degraded = deg.Reason
	}
	if d.Action != nil {
		s.Action = string(d.Action.Type) + " " + d.Action.Name
		s.Learner = d.Action.AsLearner
	}
	return s
}

func TestPlanLifecycle(t *testing.T) {
	running := func(c *v1beta2.EtcdCluster) *v1beta2.EtcdCluster {
		c.Status.Phase = v1beta2.PhaseRunning
		c.Status.Size = 3
		return c
	}
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   summary
	}{{
		name:   "bootstrap",
		reason: "with no Pod and no membership, the seed is the only Pod, and no etcd call is possible or needed",
		in:     observed(newCluster(3, "3.6.16")),
		want: summary{
			Pods: []string{SeedName(testCluster, testUID)}, Phase: v1beta2.PhaseCreating,
			Progressing: ReasonBootstrapping, Resync: true,
		},
	}, {
		name:   "seed not answering yet",
		reason: "a seed Pod that is not running keeps the cluster Creating and is kept as it is",
		in:     observed(newCluster(3, "3.6.16"), memberPod(name(0), corev1.PodPending, false)),
		want: summary{
			Pods: []string{name(0)}, Phase: v1beta2.PhaseCreating, Progressing: ReasonBootstrapping, Resync: true,
		},
	}, {
		name:   "grow from the seed with a learner",
		reason: "one healthy member and size 3: the next member is added as a learner, and its Pod is not in this plan's answer",
		in: with(observed(newCluster(3, "3.6.16"), readyPod(name(0))), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)))
		}),
		want: summary{
			Action: "add demo-fresh", Learner: true, Pods: []string{name(0)},
			Phase: v1beta2.PhaseCreating, Progressing: ReasonScalingUp, Resync: true,
		},
	}, {
		name:   "etcd older than 3.4 grows with a plain member add",
		reason: "learners do not exist before 3.4; etcd accepts a second voter for a single started member",
		in: with(observed(newCluster(3, "3.3.25"), readyPod(name(0))), func(o *Observed) {
			m := member(1, name(0))
			m.Version = "3.3.25"
			o.Membership = memberList(1, m)
		}),
		want: summary{
			Action: "add demo-fresh", Learner: false, Pods: []string{name(0)},
			Phase: v1beta2.PhaseCreating, Progressing: ReasonScalingUp, Resync: true,
		},
	}, {
		name:   "etcd 3.2 grows with a plain member add",
		reason: "a 3.2 cluster has no learners",
		in: with(observed(newCluster(3, "3.2.13"), readyPod(name(0))), func(o *Observed) {
			m := member(1, name(0))
			m.Version = "3.2.13"
			o.Membership = memberList(1, m)
		}),
		want: summary{
			Action: "add demo-fresh", Pods: []string{name(0)},
			Phase: v1beta2.PhaseCreating, Progressing: ReasonScalingUp, Resync: true,
		},
	}, {
		name:   "added learner without a Pod gets one",
		reason: "after MemberAdd (or a hook restart right after it) the unstarted member's Pod is rendered, and nothing else changes",
		in: with(observed(newCluster(3, "3.6.16"), readyPod(name(0))), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)), unstarted(2, name(1), true))
		}),
		want: summary{
			Pods: []string{name(0), name(1)}, Phase: v1beta2.PhaseCreating,
			Progressing: ReasonWaitingForMember, Resync: true,
		},
	}, {
		name:   "learner catching up",
		reason: "a learner below 90% of the leader's raft index is not promoted yet",
		in: with(observed(newCluster(3, "3.6.16"), readyPod(name(0)), readyPod(name(1))), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)), learner(2, name(1), 50))
		}),
		want: summary{
			Pods: []string{name(0), name(1)}, Phase: v1beta2.PhaseCreating,
			Progressing: ReasonWaitingForMember, Resync: true,
		},
	}, {
		name:   "learner caught up is promoted",
		reason: "a ready learner at 90% or more of the leader's raft index is promoted",
		in: with(observed(newCluster(3, "3.6.16"), readyPod(name(0)), readyPod(name(1))), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)), learner(2, name(1), 95))
		}),
		want: summary{
			Action: "promote " + name(1), Pods: []string{name(0), name(1)}, Phase: v1beta2.PhaseCreating,
			Progressing: ReasonPromotingLearner, Resync: true,
		},
	}, {
		name:   "wait for a member that is not ready",
		reason: "no growth while a member's Pod is not ready",
		in: with(observed(newCluster(3, "3.6.16"), readyPod(name(0)), memberPod(name(1), corev1.PodRunning, false)), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)), member(2, name(1)))
		}),
		want: summary{
			Pods: []string{name(0), name(1)}, Phase: v1beta2.PhaseCreating,
			Progressing: ReasonWaitingForMember, Resync: true,
		},
	}, {
		name:   "converged",
		reason: "size members, all started voters with ready Pods: no action, no resync, Running",
		in: with(observed(running(newCluster(3, "3.6.16")), readyPod(name(0)), readyPod(name(1)), readyPod(name(2))), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), member(3, name(2)))
		}),
		want: summary{
			Pods: []string{name(0), name(1), name(2)}, Phase: v1beta2.PhaseRunning, Progressing: ReasonConverged,
		},
	}, {
		name:   "shrink removes a non-leader",
		reason: "the leader is member 3, the last by name; the member removed is the last non-leader by name",
		in: with(observed(running(newCluster(2, "3.6.16")), readyPod(name(0)), readyPod(name(1)), readyPod(name(2))), func(o *Observed) {
			o.Membership = memberList(3, member(1, name(0)), member(2, name(1)), member(3, name(2)))
		}),
		want: summary{
			Action: "remove " + name(1), Pods: []string{name(0), name(1), name(2)}, Phase: v1beta2.PhaseRunning,
			Progressing: ReasonScalingDown, Resync: true,
		},
	}, {
		name:   "a Pod that is not a member is dropped",
		reason: "after MemberRemove, the removed member's Pod leaves the answer",
		in: with(observed(running(newCluster(2, "3.6.16")), readyPod(name(0)), readyPod(name(1)), readyPod(name(2))), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)), member(3, name(2)))
		}),
		want: summary{
			Pods: []string{name(0), name(2)}, Phase: v1beta2.PhaseRunning, Progressing: ReasonConverged,
		},
	}, {
		name:   "dead member is removed first",
		reason: "a started member whose Pod is gone had its data on an emptyDir: it is removed while the others keep a quorum",
		in: with(observed(running(newCluster(3, "3.6.16")), readyPod(name(0)), readyPod(name(1))), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), down(member(3, name(2))))
		}),
		want: summary{
			Action: "remove " + name(2), Pods: []string{name(0), name(1)}, Phase: v1beta2.PhaseRunning,
			Progressing: ReasonReplacingMember, Degraded: ReasonDeadMember, Resync: true,
		},
	}, {
		name:   "member stuck outside Running is dead after the grace period",
		reason: "its node is gone: the Pod stays Pending-or-Unknown, and its emptyDir is lost",
		in: with(observed(running(newCluster(3, "3.6.16")), readyPod(name(0)), readyPod(name(1)), stuckPod(name(2), DeadTimeout+time.Minute)), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), down(member(3, name(2))))
		}),
		want: summary{
			Action: "remove " + name(2), Pods: []string{name(0), name(1), name(2)}, Phase: v1beta2.PhaseRunning,
			Progressing: ReasonReplacingMember, Degraded: ReasonDeadMember, Resync: true,
		},
	}, {
		name:   "member briefly outside Running is waited for",
		reason: "within the grace period a member is not replaced",
		in: with(observed(running(newCluster(3, "3.6.16")), readyPod(name(0)), readyPod(name(1)), stuckPod(name(2), time.Minute)), func(o *Observed) {
			o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), down(member(3, name(2))))
		}),
		want: summary{
			Pods: []string{name(0), name(1), name(2)}, Phase: v1beta2.PhaseRunning,
			Progressing: ReasonWaitingForMember, Degraded: ReasonMembersUnready, Resync: true,
		},
	}, {
		name:   "quorum lost",
		reason: "two of three voters do not answer: nothing is removed or added, and status says so",
		in: with(observed(running(newCluster(3, "3.6.16")), readyPod(name(0))), func(o *Observed) {
			o.Membership = memberList(0, member(1, name(0)), down(member(2, name(1))), down(member(3, name(2))))
			o.Membership.Stale = true
		}),
		want: summary{
			Phase: v1beta2.PhaseFailed, Pods: []string{name(0)},
			Progressing: ReasonQuorumLost, Degraded: ReasonQuorumLost, Resync: true,
		},
	}, {
		name:   "stale membership keeps unknown Pods",
		reason: "a list read without quorum may be out of date, so a Pod missing from it is kept",
		in: with(observed(running(newCluster(3, "3.6.16")), readyPod(name(0)), readyPod(name(9))), func(o *Observed) {
			o.Membership = memberList(0, member(1, name(0)), down(member(2, name(1))), down(member(3, name(2))))
			o.Membership.Stale = true
		}),
		want: summary{
			Phase: v1beta2.PhaseFailed, Pods: []string{name(0), name(9)},
			Progressing: ReasonQuorumLost, Degraded: ReasonQuorumLost, Resync: true,
		},
	}, {
		name:   "etcd unreachable on a running cluster",
		reason: "without a membership read nothing is dropped; ready Pods mean the cluster is probably fine",
		in: with(observed(running(newCluster(3, "3.6.16")), readyPod(name(0)), readyPod(name(1)), readyPod(name(2))), func(o *Observed) {
			o.MembershipError = "context deadline exceeded"
		}),
		want: summary{
			Phase: v1beta2.PhaseRunning, Pods: []string{name(0), name(1), name(2)},
			Progressing: ReasonConverged, Degraded: ReasonEtcdUnreachable, Resync: true,
		},
	}, {
		name:   "all members lost",
		reason: "a cluster that ran and has no Pod and no PVC left is not silently bootstrapped empty",
		in: with(observed(running(newCluster(3, "3.6.16"))), func(o *Observed) {
			o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, true)
		}),
		want: summary{
			Phase: v1beta2.PhaseFailed, Progressing: ReasonAllMembersLost, Degraded: ReasonAllMembersLost, Resync: true,
		},
	}, {
		name:   "invalid spec freezes the cluster",
		reason: "a typo in Git must not delete a running cluster: every child is kept and no action is taken",
		in: with(observed(running(newCluster(-1, "3.6.16")), readyPod(name(0)), readyPod(name(1)), readyPod(name(2))), func(o *Observed) {
			o.SpecErrors = field.ErrorList{field.Invalid(field.NewPath("spec", "size"), -1, "must be between 1 and 7")}
			o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), member(3, name(2)))
		}),
		want: summary{
			Pods: []string{name(0), name(1), name(2)}, Phase: v1beta2.PhaseRunning,
			Progressing: ReasonInvalidSpec, Degraded: ReasonInvalidSpec,
		},
	}, {
		name:   "paused freezes the cluster",
		reason: "with spec.paused, a size change is not acted on",
		in: with(observed(running(newCluster(5, "3.6.16")), readyPod(name(0)), readyPod(name(1)), readyPod(name(2))), func(o *Observed) {
			o.Cluster.Spec.Paused = true
			o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), member(3, name(2)))
		}),
		want: summary{
			Pods: []string{name(0), name(1), name(2)}, Phase: v1beta2.PhaseRunning, Progressing: ReasonPaused,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(Plan(tt.in))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s\nPlan() mismatch (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}

func with(o *Observed, f func(*Observed)) *Observed {
	f(o)
	return o
}

// TestPlanAddThenRender walks the two-phase protocol of one sync: the
// first plan chooses MemberAdd and leaves the new Pod out; the plan made
// with the membership etcd returned renders it, joining the existing
// cluster.
func TestPlanAddThenRender(t *testing.T) {
	o := with(observed(newCluster(3, "3.6.16"), readyPod(name(0))), func(o *Observed) {
		o.Membership = memberList(1, member(1, name(0)))
	})
	first := Plan(o)
	if first.Action == nil || first.Action.Type != membership.ActionAddMember {
		t.Fatalf("first plan: want an add action, got %+v", first.Action)
	}
	if p := renderedPod(first.Children, first.Action.Name); p != nil {
		t.Fatalf("first plan renders the Pod of %s before MemberAdd", first.Action.Name)
	}

	added := unstarted(2, first.Action.Name, true)
	o.Membership = o.Membership.WithMembers([]membership.Member{member(1, name(0)), added})
	o.Acted = &Outcome{Action: *first.Action}
	second := Plan(o)
	if second.Action != nil {
		t.Fatalf("second plan proposes another action: %+v", second.Action)
	}
	pod := renderedPod(second.Children, first.Action.Name)
	if pod == nil {
		t.Fatalf("second plan does not render %s; children %v", first.Action.Name, childNames(second.Children))
	}
	wantArgs := []string{
		"--initial-cluster=demo-fresh=http://demo-fresh.demo.prod.svc:2380,demo-m0=http://demo-m0.demo.prod.svc:2380",
		"--initial-cluster-state=existing",
	}
	if diff := cmp.Diff(wantArgs, pod.Spec.Containers[0].Command[7:9]); diff != "" {
		t.Errorf("new member's bootstrap flags (-want +got):\n%s", diff)
	}
	if got := conditionOf(second.Status, v1beta2.ConditionProgressing).Reason; got != ReasonScalingUp {
		t.Errorf("Progressing reason = %q, want %q", got, ReasonScalingUp)
	}
}

func TestPlanReportsFailedAction(t *testing.T) {
	o := with(observed(newCluster(3, "3.6.16"), readyPod(name(0))), func(o *Observed) {
		o.Membership = memberList(1, member(1, name(0)))
	})
	first := Plan(o)
	o.Acted = &Outcome{Action: *first.Action, Err: errors.New("context deadline exceeded")}
	second := Plan(o)
	if diff := cmp.Diff([]string{name(0)}, podsIn(second.Children)); diff != "" {
		t.Errorf("a failed add must not render the new Pod (-want +got):\n%s", diff)
	}
	cond := conditionOf(second.Status, v1beta2.ConditionProgressing)
	if cond.Reason != ReasonActionFailed {
		t.Errorf("Progressing reason = %q, want %q (message %q)", cond.Reason, ReasonActionFailed, cond.Message)
	}
}

func TestSeedPodBootstrapFlags(t *testing.T) {
	d := Plan(observed(newCluster(3, "3.6.16")))
	seed := SeedName(testCluster, testUID)
	pod := renderedPod(d.Children, seed)
	if pod == nil {
		t.Fatalf("no seed Pod in %v", childNames(d.Children))
	}
	want := []string{
		"/usr/local/bin/etcd",
		"--name=" + seed,
		"--data-dir=/var/etcd/data",
		"--listen-client-urls=http://0.0.0.0:2379",
		"--listen-peer-urls=http://0.0.0.0:2380",
		"--advertise-client-urls=http://" + seed + ".demo.prod.svc:2379",
		"--initial-advertise-peer-urls=http://" + seed + ".demo.prod.svc:2380",
		"--initial-cluster=" + seed + "=http://" + seed + ".demo.prod.svc:2380",
		"--initial-cluster-state=new",
		"--initial-cluster-token=demo-" + testUID,
		"--listen-metrics-urls=http://0.0.0.0:2381",
		"--quota-backend-bytes=2147483648",
		"--auto-compaction-mode=periodic",
		"--auto-compaction-retention=1h",
	}
	if diff := cmp.Diff(want, pod.Spec.Containers[0].Command); diff != "" {
		t.Errorf("seed command (-want +got):\n%s", diff)
	}
	if pod.Spec.Hostname != seed || pod.Spec.Subdomain != testCluster || pod.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("seed identity: hostname %q subdomain %q restartPolicy %q", pod.Spec.Hostname, pod.Spec.Subdomain, pod.Spec.RestartPolicy)
	}
	if again := Plan(observed(newCluster(3, "3.6.16"))); renderedPod(again.Children, seed) == nil {
		t.Errorf("a second bootstrap sync names a different seed: %v", childNames(again.Children))
	}
}

func TestPersistentMemberComesBack(t *testing.T) {
	c := newCluster(3, "3.6.16")
	c.Spec.Pod = &v1beta2.PodPolicy{PersistentVolumeClaimSpec: &corev1.PersistentVolumeClaimSpec{}}
	c.Status.Phase = v1beta2.PhaseRunning
	o := observed(c, readyPod(name(0)), readyPod(name(1)))
	for i := range 3 {
		o.PVCs[name(i)] = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name(i)}}
	}
	o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), down(member(3, name(2))))
	d := Plan(o)
	if d.Action != nil {
		t.Errorf("a member with its data on a PVC must not be replaced, got action %s", d.Action)
	}
	pod := renderedPod(d.Children, name(2))
	if pod == nil {
		t.Fatalf("the lost member's Pod is not recreated: %v", childNames(d.Children))
	}
	if claim := pod.Spec.Volumes[0].PersistentVolumeClaim; claim == nil || claim.ClaimName != name(2) {
		t.Errorf("recreated Pod's data volume = %+v, want claim %s", pod.Spec.Volumes[0], name(2))
	}
}

func TestUnstartedMemberGivenUp(t *testing.T) {
	stuck := memberPod(name(1), corev1.PodPending, false)
	stuck.CreationTimestamp = metav1.NewTime(testNow.Add(-StartTimeout - time.Second))
	o := observed(newCluster(3, "3.6.16"), readyPod(name(0)), stuck)
	o.Membership = memberList(1, member(1, name(0)), unstarted(2, name(1), true))
	d := Plan(o)
	if d.Action == nil || d.Action.Type != membership.ActionRemoveMember || d.Action.MemberID != 2 {
		t.Fatalf("want the stuck learner removed, got %+v", d.Action)
	}
}

// stuckPod has not been running, nor ready, for the given time.
func stuckPod(n string, since time.Duration) *corev1.Pod {
	p := memberPod(n, corev1.PodPending, false)
	p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(testNow.Add(-since))
	return p
}
