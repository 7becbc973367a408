package etcdcluster

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// hibernating is a running cluster of n members on claims, asked to
// hibernate, whose leader is member leader.
func hibernating(n, leader int) *Observed {
	onAfter := make([]bool, n)
	for i := range onAfter {
		onAfter[i] = true
	}
	o := rolloutCluster(true, onAfter...)
	o.Cluster.Spec.Hibernated = true
	o.Membership.LeaderID = uint64(leader + 1)
	return o
}

// stoppedPods are the member Pods in view that an answer leaves out.
func stoppedPods(o *Observed, d Decision) []string {
	kept := map[string]bool{}
	for _, c := range d.Children {
		if c.Kind == plan.KindPod {
			kept[c.Name] = true
		}
	}
	var out []string
	for name := range o.Pods {
		if !kept[name] {
			out = append(out, name)
		}
	}
	return sorted(out)
}

func TestHibernateStopsMembersWithoutLosingQuorum(t *testing.T) {
	tests := []struct {
		name    string
		reason  string
		members int
		leader  int
		gone    []int // members whose Pods are already gone
		leaving []int // members whose Pods are being deleted
		want    []int // members this sync stops
	}{
		{"3: a follower first", "the newest follower goes alone: 2 of 3 still hold a quorum", 3, 0, nil, nil, []int{2}},
		{"3: not the leader", "the newest name leads: the next newest follower goes instead, so no election happens on the way down", 3, 2, nil, nil, []int{1}},
		{"3: one at a time", "a Pod being deleted still runs until it is gone: nothing else goes meanwhile", 3, 0, nil, []int{2}, nil},
		{"3: the last quorum together", "2 of 3 left are the quorum: both go at once, so neither runs on without a quorum", 3, 0, []int{2}, nil, []int{0, 1}},
		{"5: two followers, one at a time", "4 of 5 still hold a quorum of 3", 5, 0, []int{4}, nil, []int{3}},
		{"5: then the last three", "3 of 5 are the quorum: they go together, the leader among them", 5, 0, []int{4, 3}, nil, []int{0, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := hibernating(tt.members, tt.leader)
			for _, i := range tt.gone {
				delete(o.Pods, name(i))
			}
			for _, i := range tt.leaving {
				now := metav1.NewTime(testNow)
				o.Pods[name(i)].DeletionTimestamp = &now
			}
			d := Plan(o)
			var want []string
			for _, i := range tt.want {
				want = append(want, name(i))
			}
			got := stoppedPods(o, d)
			for _, i := range tt.leaving {
				// Left out of the answer too: its deletion is under way.
				got = without(got, name(i))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: Pods stopped (-want +got):\n%s", tt.reason, diff)
			}
			if d.Action != nil {
				t.Errorf("hibernation changed the membership: %v", d.Action)
			}
			if prog := conditionOf(d.Status, v1beta2.ConditionProgressing); prog.Reason != ReasonHibernating {
				t.Errorf("Progressing is %s (%s), want %s", prog.Reason, prog.Message, ReasonHibernating)
			}
			if got := len(childrenOf(d.Children, plan.KindPVC)); got != len(o.PVCs) {
				t.Errorf("%d claims in the answer, want every one of the %d: the data stays", got, len(o.PVCs))
			}
		})
	}
}

func TestHibernated(t *testing.T) {
	o := hibernating(3, 0)
	o.Pods = map[string]*corev1.Pod{}
	o.Membership, o.MembershipError = nil, "no member Pod to ask"
	d := Plan(o)
	st := d.Status
	if st.Phase != v1beta2.PhaseHibernated {
		t.Errorf("phase %s, want %s", st.Phase, v1beta2.PhaseHibernated)
	}
	for _, c := range []struct {
		typ    v1beta2.ConditionType
		status metav1.ConditionStatus
	}{
		{v1beta2.ConditionReady, metav1.ConditionTrue},
		{v1beta2.ConditionReconciling, metav1.ConditionFalse},
		{v1beta2.ConditionStalled, metav1.ConditionFalse},
		{v1beta2.ConditionAvailable, metav1.ConditionFalse},
		{v1beta2.ConditionDegraded, metav1.ConditionFalse},
	} {
		if got := conditionOf(st, c.typ); got.Status != c.status {
			t.Errorf("%s is %s (%s %s), want %s: a cluster hibernated on purpose is Current for kstatus, and serves nothing", c.typ, got.Status, got.Reason, got.Message, c.status)
		}
	}
	if len(podsIn(d.Children)) != 0 || len(childrenOf(d.Children, plan.KindPVC)) != 3 || d.Action != nil {
		t.Errorf("hibernated: Pods %v, claims %v, action %v; want no Pod, the 3 claims, no action", podsIn(d.Children), childrenOf(d.Children, plan.KindPVC), d.Action)
	}
	for _, svc := range []string{testCluster, testCluster + "-client"} {
		if !slices.Contains(childrenOf(d.Children, plan.KindService), svc) {
			t.Errorf("the Service %s is not kept while hibernated", svc)
		}
	}

	// Woken: the same members on the same claims.
	o.Cluster.Status = st
	o.Cluster.Spec.Hibernated = false
	d = Plan(o)
	if diff := cmp.Diff([]string{name(0), name(1), name(2)}, podsIn(d.Children)); diff != "" {
		t.Errorf("woken: every member back on its claim, under its name (-want +got):\n%s", diff)
	}
	for _, pod := range podsIn(d.Children) {
		if claim := observedClaim(renderedPod(d.Children, pod)); claim != pod {
			t.Errorf("woken: Pod %s mounts claim %q, want its own", pod, claim)
		}
	}
	if d.Action != nil {
		t.Errorf("waking changed the membership: %v", d.Action)
	}
	if avail := conditionOf(d.Status, v1beta2.ConditionAvailable); avail.Reason != ReasonWaking {
		t.Errorf("waking: Available %s (%s), want %s: no member ran, so no quorum is lost", avail.Reason, avail.Message, ReasonWaking)
	}
	if ready := conditionOf(d.Status, v1beta2.ConditionReady); ready.Status != metav1.ConditionFalse {
		t.Errorf("waking: Ready is %s (%s); the members are not back yet", ready.Status, ready.Message)
	}
}

func TestHibernationRefusedOnEmptyDir(t *testing.T) {
	o := rolloutCluster(false, true, true, true)
	o.Cluster.Spec.Hibernated = true
	d := Plan(o)
	if got := stoppedPods(o, d); len(got) != 0 {
		t.Errorf("members on emptyDir stopped: %v; their data would be gone", got)
	}
	deg := conditionOf(d.Status, v1beta2.ConditionDegraded)
	if deg.Reason != ReasonHibernationRefused || !strings.Contains(deg.Message, "persistentVolumeClaimSpec") {
		t.Errorf("Degraded %s: %s; want %s naming spec.pod.persistentVolumeClaimSpec", deg.Reason, deg.Message, ReasonHibernationRefused)
	}
}

func without(names []string, drop string) []string {
	var out []string
	for _, n := range names {
		if n != drop {
			out = append(out, n)
		}
	}
	return out
}

func observedClaim(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}
