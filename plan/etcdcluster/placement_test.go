package etcdcluster

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

func TestDefaultSpread(t *testing.T) {
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{LabelApp: "etcd", LabelCluster: testCluster}}
	spread := func(when corev1.UnsatisfiableConstraintAction) []corev1.TopologySpreadConstraint {
		return []corev1.TopologySpreadConstraint{
			{MaxSkew: 1, TopologyKey: v1beta2.LabelTopologyZone, WhenUnsatisfiable: when, LabelSelector: selector},
			{MaxSkew: 1, TopologyKey: v1beta2.LabelHostname, WhenUnsatisfiable: when, LabelSelector: selector},
		}
	}
	own := []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: "rack", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: selector}}
	tests := []struct {
		name   string
		reason string
		pod    *v1beta2.PodPolicy
		want   []corev1.TopologySpreadConstraint
	}{
		{"no pod policy", "members spread over zones and nodes, and still schedule on one zone", nil, spread(corev1.ScheduleAnyway)},
		{"preferred", "spelled out, the default", &v1beta2.PodPolicy{Spread: v1beta2.SpreadPreferred}, spread(corev1.ScheduleAnyway)},
		{"strict", "spread: strict requires it", &v1beta2.PodPolicy{Spread: v1beta2.SpreadStrict}, spread(corev1.DoNotSchedule)},
		{"own constraints", "the user's constraints replace the default", &v1beta2.PodPolicy{TopologySpreadConstraints: own}, own},
		{"own affinity", "an affinity replaces the default placement", &v1beta2.PodPolicy{Affinity: &corev1.Affinity{}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(3, "3.6.16")
			c.Spec.Pod = tt.pod
			d := Plan(observed(c))
			pod := renderedPod(d.Children, podsIn(d.Children)[0])
			if pod == nil {
				t.Fatalf("no member Pod in the answer: %v", childNames(d.Children))
			}
			if diff := cmp.Diff(tt.want, pod.Spec.TopologySpreadConstraints); diff != "" {
				t.Errorf("%s: topologySpreadConstraints (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}

func TestPlacementInStatus(t *testing.T) {
	c := newCluster(3, "3.6.16")
	pods := []*corev1.Pod{readyPod(name(0)), readyPod(name(1)), memberPod(name(2), corev1.PodPending, false)}
	pods[0].Spec.NodeName, pods[0].Labels = "node-a", map[string]string{v1beta2.LabelTopologyZone: "zone-1"}
	// Before Kubernetes 1.35, or with the admission off, no zone label.
	pods[1].Spec.NodeName = "node-b"
	o := observed(c, pods...)
	o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), member(3, name(2)))
	got := Plan(o).Status.Members.Placement
	want := []v1beta2.MemberPlacement{{Name: name(0), Node: "node-a", Zone: "zone-1"}, {Name: name(1), Node: "node-b"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status.members.placement: every scheduled member's node and zone, by name; none for a Pod not yet scheduled (-want +got):\n%s", diff)
	}
}

func TestUnschedulableMemberIsNamed(t *testing.T) {
	spreadStuck := func(p *corev1.Pod, c *v1beta2.EtcdCluster) *corev1.Pod {
		p.Spec.TopologySpreadConstraints = defaultSpread(c.Name, c.Spec.Pod.SpreadOrDefault())
		p.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints (missing required label). preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse},
		}
		return p
	}
	tests := []struct {
		name      string
		reason    string
		running   bool
		wantParts []string
	}{
		{"a new cluster", "a cluster whose members cannot be placed says so, not only that it bootstraps", false, []string{
			"member " + name(0) + " is Pending, and the scheduler says: 0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints",
			"maxSkew 1 over topology.kubernetes.io/zone (DoNotSchedule), maxSkew 1 over kubernetes.io/hostname (DoNotSchedule)",
			"spec.pod.spread: strict places no member where",
		}},
		{"a running cluster", "a member added to a running cluster that cannot be placed is named the same way", true, []string{
			"member " + name(2) + " is Pending",
			"maxSkew 1 over topology.kubernetes.io/zone (DoNotSchedule)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(3, "3.6.16")
			c.Spec.Pod = &v1beta2.PodPolicy{Spread: v1beta2.SpreadStrict}
			var o *Observed
			if tt.running {
				c.Status.Phase = v1beta2.PhaseRunning
				o = observed(c, readyPod(name(0)), readyPod(name(1)), spreadStuck(memberPod(name(2), corev1.PodPending, false), c))
				o.Membership = memberList(1, member(1, name(0)), member(2, name(1)), unstarted(3, name(2), true))
			} else {
				o = observed(c, spreadStuck(memberPod(name(0), corev1.PodPending, false), c))
			}
			deg := conditionOf(Plan(o).Status, v1beta2.ConditionDegraded)
			if deg.Status != metav1.ConditionTrue || deg.Reason != ReasonMemberUnschedulable {
				t.Fatalf("%s: Degraded is %s %s (%s), want True %s", tt.reason, deg.Status, deg.Reason, deg.Message, ReasonMemberUnschedulable)
			}
			for _, part := range tt.wantParts {
				if !strings.Contains(deg.Message, part) {
					t.Errorf("%s: the message does not say %q:\n%s", tt.reason, part, deg.Message)
				}
			}
		})
	}
}
