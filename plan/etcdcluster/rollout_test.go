package etcdcluster

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// The spec before and after a change that only a new Pod can take.
var (
	specBefore = v1beta2.PodPolicy{}
	specAfter  = v1beta2.PodPolicy{Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
	}}
)

// rolloutCluster is a running cluster of ready members, m0 the leader,
// whose spec asks for specAfter; the members' Pods were rendered from
// specBefore or specAfter as onAfter says. With claims, each member's data
// is on its PVC.
func rolloutCluster(claims bool, onAfter ...bool) *Observed {
	c := newCluster(len(onAfter), "3.6.16")
	c.Status.Phase = v1beta2.PhaseRunning
	after := specAfter
	if claims {
		after.PersistentVolumeClaimSpec = &corev1.PersistentVolumeClaimSpec{}
	}
	c.Spec.Pod = &after
	o := observed(c)
	o.Membership = memberList(1)
	for i, isAfter := range onAfter {
		policy := specBefore
		if isAfter {
			policy = specAfter
		}
		pod := onSpec(readyPod(name(i)), v1beta2.ClusterSpec{Version: "3.6.16", Pod: &policy})
		if claims {
			pod.Spec.Volumes = []corev1.Volume{{Name: dataVolume, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name(i)},
			}}}
			o.PVCs[name(i)] = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: testNS}}
		}
		o.Pods[name(i)] = pod
		o.Membership.Members = append(o.Membership.Members, member(uint64(i+1), name(i)))
	}
	return o
}

// onSpec is a Pod rendered from spec: it carries spec's hash, in its
// metadata and in the configuration the hook last applied.
func onSpec(p *corev1.Pod, spec v1beta2.ClusterSpec) *corev1.Pod {
	p.Annotations[AnnotationPodSpecHash] = podSpecHash(spec.WithDefaults())
	var applied map[string]any
	if err := json.Unmarshal([]byte(p.Annotations[plan.LastAppliedAnnotation]), &applied); err != nil {
		panic(err)
	}
	applied["metadata"].(map[string]any)["annotations"] = map[string]any{AnnotationPodSpecHash: p.Annotations[AnnotationPodSpecHash]}
	raw, _ := json.Marshal(applied)
	p.Annotations[plan.LastAppliedAnnotation] = string(raw)
	return p
}

func unschedulablePod(p *corev1.Pod) *corev1.Pod {
	p.Status.Phase = corev1.PodPending
	p.Status.ContainerStatuses = nil
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse},
	}
	return p
}

type rolloutSummary struct {
	Action      string
	Dropped     []string // member Pods the answer leaves out
	Progressing string
	Degraded    string
}

func summarizeRollout(o *Observed, d Decision) rolloutSummary {
	s := rolloutSummary{Progressing: conditionOf(d.Status, v1beta2.ConditionProgressing).Reason}
	if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Status == metav1.ConditionTrue {
		s.Degraded = deg.Reason
	}
	if d.Action != nil {
		s.Action = string(d.Action.Type) + " " + d.Action.Name
		if d.Action.Type == membership.ActionAddMember {
			s.Action = string(d.Action.Type) + " learner"
		}
	}
	answered := map[string]bool{}
	for _, n := range podsIn(d.Children) {
		answered[n] = true
	}
	for n := range o.Pods {
		if !answered[n] {
			s.Dropped = append(s.Dropped, n)
		}
	}
	return s
}

func TestPlanRollout(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   rolloutSummary
		// wantMessage is part of the Progressing condition's message.
		wantMessage string
	}{{
		name:        "claims: first follower",
		reason:      "a member on a claim keeps its identity: its Pod is dropped, to be rendered again on the claim; no membership change",
		in:          rolloutCluster(true, false, false, false),
		want:        rolloutSummary{Dropped: []string{name(1)}, Progressing: ReasonRollingChange},
		wantMessage: "member demo-m1 gets a new Pod on its claim; 0 of 3 members on the new spec; still to roll: demo-m0, demo-m1, demo-m2",
	}, {
		name:   "claims: the dropped member's Pod comes back on the new spec",
		reason: "its Pod is gone and its claim is there: the Pod is rendered again from the current spec, and the rollout waits for it",
		in: with(rolloutCluster(true, false, true, false), func(o *Observed) {
			delete(o.Pods, name(1))
			o.Membership.Members[1] = down(o.Membership.Members[1])
		}),
		want:        rolloutSummary{Progressing: ReasonRollingChange, Degraded: ReasonMembersUnready},
		wantMessage: "waiting for member demo-m1, which gets a new Pod",
	}, {
		name:   "claims: next follower once the first has caught up",
		reason: "every member ready and caught up: the next outdated follower goes",
		in:     rolloutCluster(true, false, true, false),
		want:   rolloutSummary{Dropped: []string{name(2)}, Progressing: ReasonRollingChange},
	}, {
		name:   "claims: a member that trails the leader holds the rollout",
		reason: "the member rolled last is ready but has not caught up with the leader's log: taking another member out now could cost the quorum",
		in: with(rolloutCluster(true, false, true, false), func(o *Observed) {
			o.Membership.Members[0].RaftIndex = 100 + 5*maxRestartLag
		}),
		want:        rolloutSummary{Progressing: ReasonRollingChange},
		wantMessage: "waiting for member demo-m1, which is catching up with the leader",
	}, {
		name:   "claims: leader last, after leadership moves",
		reason: "only the leader is outdated: leadership moves to an up-to-date member first",
		in:     rolloutCluster(true, false, true, true),
		want:   rolloutSummary{Action: "move-leader " + name(1), Progressing: ReasonMovingLeader},
	}, {
		name:   "claims: the leader's Pod goes once it no longer leads",
		reason: "leadership has moved to m1; m0 is an outdated follower now",
		in: with(rolloutCluster(true, false, true, true), func(o *Observed) {
			o.Membership.LeaderID = 2
		}),
		want: rolloutSummary{Dropped: []string{name(0)}, Progressing: ReasonRollingChange},
	}, {
		name:   "claims: a single member restarts",
		reason: "a single member has nobody to hand over to: its restart is an outage it cannot avoid, and refusing it would keep the old spec for good",
		in:     rolloutCluster(true, false),
		want:   rolloutSummary{Dropped: []string{name(0)}, Progressing: ReasonRollingChange},
	}, {
		name:   "halted on a member that cannot run the new spec",
		reason: "the member rolled first cannot be scheduled: nothing more is rolled, and the condition names it",
		in: with(rolloutCluster(true, false, true, false), func(o *Observed) {
			unschedulablePod(o.Pods[name(1)])
			o.Membership.Members[1] = down(o.Membership.Members[1])
		}),
		want:        rolloutSummary{Progressing: ReasonRolloutHalted, Degraded: ReasonRolloutHalted},
		wantMessage: "rollout halted: member demo-m1 on the new spec cannot run: Unschedulable: 0/3 nodes",
	}, {
		name:   "setting the spec back rescues the broken member",
		reason: "the spec is the old one again: the member whose Pod cannot run on the abandoned spec gets a Pod on the current one at once",
		in: with(rolloutCluster(true, false, true, false), func(o *Observed) {
			o.Cluster.Spec.Pod.Resources = specBefore.Resources
			unschedulablePod(o.Pods[name(1)])
			o.Membership.Members[1] = down(o.Membership.Members[1])
		}),
		// Degraded says why the member does not run: its Pod cannot be scheduled.
		want: rolloutSummary{Dropped: []string{name(1)}, Progressing: ReasonRollingChange, Degraded: ReasonMemberUnschedulable},
	}, {
		name:   "an unready member that is not rolling holds the rollout",
		reason: "each step waits until every member is ready",
		in: with(rolloutCluster(true, false, false, false), func(o *Observed) {
			o.Pods[name(2)].Status.Conditions[0].Status = corev1.ConditionFalse
		}),
		want: rolloutSummary{Progressing: ReasonWaitingForMember, Degraded: ReasonMembersUnready},
	}, {
		name:   "emptyDir: a learner on the new spec joins first",
		reason: "a member on an emptyDir cannot keep its data: a replacement joins as a learner before anything is removed",
		in:     rolloutCluster(false, false, false, false),
		want:   rolloutSummary{Action: "add learner", Progressing: ReasonRollingChange},
	}, {
		name:   "emptyDir: the learner on the new spec is promoted",
		reason: "the replacement has caught up: it becomes a voter (4 voters: fault tolerance is still 1)",
		in: with(rolloutCluster(false, false, false, false), func(o *Observed) {
			o.Pods[name(3)] = onSpec(readyPod(name(3)), o.Cluster.Spec)
			o.Membership.Members = append(o.Membership.Members, learner(4, name(3), 100))
		}),
		want: rolloutSummary{Action: "promote " + name(3), Progressing: ReasonPromotingLearner},
	}, {
		name:   "emptyDir: then the outdated member it replaces is removed",
		reason: "one voter too many: the scale-down removes an outdated follower, not the new member",
		in: with(rolloutCluster(false, false, false, false), func(o *Observed) {
			o.Pods[name(3)] = onSpec(readyPod(name(3)), o.Cluster.Spec)
			o.Membership.Members = append(o.Membership.Members, member(4, name(3)))
		}),
		want: rolloutSummary{Action: "remove " + name(2), Progressing: ReasonRollingChange},
	}, {
		name:   "emptyDir: an outdated leader hands over before it is removed",
		reason: "the only outdated member left leads: leadership moves before it is removed",
		in: with(rolloutCluster(false, false, true, true), func(o *Observed) {
			o.Pods[name(3)] = onSpec(readyPod(name(3)), o.Cluster.Spec)
			o.Membership.Members = append(o.Membership.Members, member(4, name(3)))
		}),
		want: rolloutSummary{Action: "move-leader " + name(1), Progressing: ReasonMovingLeader},
	}, {
		name:   "emptyDir: a learner made for an abandoned spec is removed",
		reason: "the spec changed again while the learner could not start: it goes at once, without waiting for it to time out",
		in: with(rolloutCluster(false, false, false, false), func(o *Observed) {
			o.Pods[name(3)] = unschedulablePod(onSpec(memberPod(name(3), corev1.PodPending, false), v1beta2.ClusterSpec{Version: "3.6.16", Pod: &v1beta2.PodPolicy{NodeSelector: map[string]string{"zone": "nowhere"}}}))
			o.Membership.Members = append(o.Membership.Members, unstarted(4, name(3), true))
		}),
		want: rolloutSummary{Action: "remove " + name(3), Progressing: ReasonRollingChange, Degraded: ReasonMemberUnschedulable},
	}, {
		name:   "emptyDir: halted on a learner that cannot run the new spec",
		reason: "the replacement cannot be scheduled: nothing is removed, and the condition names it",
		in: with(rolloutCluster(false, false, false, false), func(o *Observed) {
			o.Pods[name(3)] = unschedulablePod(onSpec(memberPod(name(3), corev1.PodPending, false), o.Cluster.Spec))
			o.Membership.Members = append(o.Membership.Members, unstarted(4, name(3), true))
		}),
		want:        rolloutSummary{Progressing: ReasonRolloutHalted, Degraded: ReasonRolloutHalted},
		wantMessage: "rollout halted: learner demo-m3 on the new spec cannot run: Unschedulable",
	}, {
		name:   "an upgrade goes before a spec change",
		reason: "version and spec changed together: the image changes in place first, one member at a time, and nothing is dropped meanwhile",
		in: with(rolloutCluster(true, false, false, false), func(o *Observed) {
			o.Cluster.Spec.Version = "3.6.17"
		}),
		want: rolloutSummary{Progressing: ReasonRollingUpgrade},
	}, {
		name:   "converged",
		reason: "every member on the current spec: nothing to do",
		in:     rolloutCluster(true, true, true, true),
		want:   rolloutSummary{Progressing: ReasonConverged},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Plan(tt.in)
			if diff := cmp.Diff(tt.want, summarizeRollout(tt.in, d)); diff != "" {
				t.Errorf("%s\nPlan() mismatch (-want +got):\n%s", tt.reason, diff)
			}
			if msg := conditionOf(d.Status, v1beta2.ConditionProgressing).Message; !strings.Contains(msg, tt.wantMessage) {
				t.Errorf("%s\nProgressing message %q does not contain %q", tt.reason, msg, tt.wantMessage)
			}
		})
	}
}

func TestMetadataChangesInPlace(t *testing.T) {
	o := rolloutCluster(true, true, true, true)
	o.Cluster.Spec.Pod.Labels = map[string]string{"team": "storage"}
	o.Cluster.Spec.Pod.Annotations = map[string]string{"example.com/owner": "storage"}
	old := o.Pods[name(1)]
	d := Plan(o)
	if d.Action != nil || len(podsIn(d.Children)) != 3 {
		t.Fatalf("a label change must neither act nor drop a Pod: action %v, pods %v", d.Action, podsIn(d.Children))
	}
	pod := renderedPod(d.Children, name(1))
	if pod == nil {
		t.Fatalf("the answer keeps m1's Pod as it was: its labels do not change")
	}
	if got := pod.Labels["team"]; got != "storage" {
		t.Errorf("label team = %q, want storage", got)
	}
	if pod.Labels[LabelNode] != name(1) || pod.Labels[LabelCluster] != testCluster {
		t.Errorf("the hook's own labels are lost: %v", pod.Labels)
	}
	want := map[string]string{"example.com/owner": "storage", AnnotationPodSpecHash: old.Annotations[AnnotationPodSpecHash]}
	if diff := cmp.Diff(want, pod.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(old.Spec.Containers, pod.Spec.Containers); diff != "" {
		t.Errorf("an in-place change must leave the containers as they were (-want +got):\n%s", diff)
	}

	// Taking the label and annotation out again takes them off the Pods,
	// and keeps the hook's own annotation.
	o.Pods[name(1)] = pod
	pod.Annotations[plan.LastAppliedAnnotation] = mustJSON(t, pod)
	o.Cluster.Spec.Pod.Labels, o.Cluster.Spec.Pod.Annotations = nil, nil
	pod = renderedPod(Plan(o).Children, name(1))
	if pod == nil || pod.Labels["team"] != "" || pod.Annotations["example.com/owner"] != "" || pod.Annotations[AnnotationPodSpecHash] == "" {
		t.Errorf("removed label and annotation still there, or the hash lost: %+v", pod)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestPodWithoutHashIsAdopted(t *testing.T) {
	o := rolloutCluster(true, true, true, true)
	delete(o.Pods[name(2)].Annotations, AnnotationPodSpecHash)
	d := Plan(o)
	if d.Action != nil || len(podsIn(d.Children)) != 3 {
		t.Fatalf("a Pod from an earlier hook release must not be rolled: action %v, pods %v", d.Action, podsIn(d.Children))
	}
	pod := renderedPod(d.Children, name(2))
	if pod == nil || pod.Annotations[AnnotationPodSpecHash] != podSpecHash(o.Cluster.Spec.WithDefaults()) {
		t.Errorf("the Pod is not adopted with the spec's hash: %+v", pod)
	}
}

func TestPodSpecHash(t *testing.T) {
	base := v1beta2.ClusterSpec{Version: "3.6.16"}
	tests := []struct {
		name   string
		reason string
		change func(*v1beta2.ClusterSpec)
		rolls  bool
	}{
		{"labels", "labels change in place", func(s *v1beta2.ClusterSpec) { s.Pod = &v1beta2.PodPolicy{Labels: map[string]string{"a": "b"}} }, false},
		{"annotations", "annotations change in place", func(s *v1beta2.ClusterSpec) { s.Pod = &v1beta2.PodPolicy{Annotations: map[string]string{"a": "b"}} }, false},
		{"version", "an upgrade changes the image in place", func(s *v1beta2.ClusterSpec) { s.Version = "3.6.17" }, false},
		{"empty pod policy", "an empty policy renders the same Pod as none", func(s *v1beta2.ClusterSpec) { s.Pod = &v1beta2.PodPolicy{} }, false},
		{"explicit defaults", "spec.etcd spelled out with its defaults renders the same flags", func(s *v1beta2.ClusterSpec) {
			s.Etcd = &v1beta2.EtcdSettings{QuotaBackendBytes: 2 << 30, AutoCompactionMode: "periodic", AutoCompactionRetention: "1h"}
		}, false},
		{"resources", "requests need a new Pod", func(s *v1beta2.ClusterSpec) { s.Pod = &specAfter }, true},
		{"node selector", "scheduling needs a new Pod", func(s *v1beta2.ClusterSpec) {
			s.Pod = &v1beta2.PodPolicy{NodeSelector: map[string]string{"disk": "ssd"}}
		}, true},
		{"spread preferred", "spelled out, the default renders the same Pods", func(s *v1beta2.ClusterSpec) { s.Pod = &v1beta2.PodPolicy{Spread: v1beta2.SpreadPreferred} }, false},
		{"spread strict", "the default constraints become DoNotSchedule", func(s *v1beta2.ClusterSpec) { s.Pod = &v1beta2.PodPolicy{Spread: v1beta2.SpreadStrict} }, true},
		{"priority class", "a new Pod field", func(s *v1beta2.ClusterSpec) { s.Pod = &v1beta2.PodPolicy{PriorityClassName: "etcd-critical"} }, true},
		{"quota", "spec.etcd renders flags", func(s *v1beta2.ClusterSpec) { s.Etcd = &v1beta2.EtcdSettings{QuotaBackendBytes: 4 << 30} }, true},
		{"compaction", "spec.etcd renders flags", func(s *v1beta2.ClusterSpec) { s.Etcd = &v1beta2.EtcdSettings{AutoCompactionRetention: "30m"} }, true},
	}
	before := podSpecHash(base.WithDefaults())
	for _, tt := range tests {
		spec := base
		tt.change(&spec)
		if rolls := podSpecHash(spec.WithDefaults()) != before; rolls != tt.rolls {
			t.Errorf("%s: rolls = %v, want %v: %s", tt.name, rolls, tt.rolls, tt.reason)
		}
	}

	a := v1beta2.ClusterSpec{Pod: &v1beta2.PodPolicy{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}}
	b := v1beta2.ClusterSpec{Pod: &v1beta2.PodPolicy{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1024Mi")}}}}
	if podSpecHash(a) != podSpecHash(b) {
		t.Errorf("1Gi and 1024Mi are the same quantity and must not roll the cluster")
	}
}

func TestEtcdSettingsFlags(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		spec   v1beta2.ClusterSpec
		want   []string
	}{{
		name:   "defaults",
		reason: "etcd's own quota, spelled out so that alerts know it; periodic compaction keeping an hour of history",
		spec:   v1beta2.ClusterSpec{Version: "3.6.16"},
		want:   []string{"--quota-backend-bytes=2147483648", "--auto-compaction-mode=periodic", "--auto-compaction-retention=1h"},
	}, {
		name:   "revision mode",
		reason: "as given",
		spec:   v1beta2.ClusterSpec{Version: "3.5.35", Etcd: &v1beta2.EtcdSettings{QuotaBackendBytes: 8 << 30, AutoCompactionMode: "revision", AutoCompactionRetention: "10000"}},
		want:   []string{"--quota-backend-bytes=8589934592", "--auto-compaction-mode=revision", "--auto-compaction-retention=10000"},
	}, {
		name:   "before 3.3",
		reason: "no mode flag, and the retention in whole hours",
		spec:   v1beta2.ClusterSpec{Version: "3.2.32", Etcd: &v1beta2.EtcdSettings{AutoCompactionRetention: "2h"}},
		want:   []string{"--quota-backend-bytes=2147483648", "--auto-compaction-retention=2"},
	}, {
		name:   "a variable in etcdEnv wins",
		reason: "etcd refuses to start when a flag and its ETCD_* variable are both set; the README once advised the variable",
		spec:   v1beta2.ClusterSpec{Version: "3.6.16", Pod: &v1beta2.PodPolicy{EtcdEnv: []corev1.EnvVar{{Name: "ETCD_QUOTA_BACKEND_BYTES", Value: "4294967296"}}}},
		want:   []string{"--auto-compaction-mode=periodic", "--auto-compaction-retention=1h"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, etcdSettingsFlags(tt.spec.WithDefaults())); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}

func TestLeadershipGoesToTheLongestRunningVoter(t *testing.T) {
	o := rolloutCluster(true, false, true, true)
	started := func(pod *corev1.Pod, ago time.Duration) {
		pod.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(testNow.Add(-ago))}
	}
	// m1 came back a moment ago; m2 has run for an hour. etcd would refuse
	// the leader's next step for 5 s if leadership went to m1.
	started(o.Pods[name(1)], time.Second)
	started(o.Pods[name(2)], time.Hour)
	d := Plan(o)
	if d.Action == nil || d.Action.Type != membership.ActionMoveLeader || d.Action.Name != name(2) {
		t.Fatalf("want leadership moved to %s, which has run longest; got %v", name(2), d.Action)
	}
}

func TestReadyLearnerLookedAtSoon(t *testing.T) {
	o := rolloutCluster(false, false, false, false)
	o.Pods[name(3)] = onSpec(readyPod(name(3)), o.Cluster.Spec)
	o.Membership.Members = append(o.Membership.Members, learner(4, name(3), 10))
	d := Plan(o)
	if d.Action != nil || d.ResyncAfter != resyncAfterAction {
		t.Errorf("a ready learner that has not caught up yet makes no Pod event: want a resync after %s, got %s (action %v)", resyncAfterAction, d.ResyncAfter, d.Action)
	}
}
