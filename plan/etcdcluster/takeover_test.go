package etcdcluster

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// coreosMemberPod is a member Pod as the CoreOS etcd-operator v0.9.x left
// it: no configuration Metacontroller applied, no pod-spec hash, its
// check-dns init container, restartPolicy Never, on version.
func coreosMemberPod(name, version string) *corev1.Pod {
	p := readyPod(name)
	p.Annotations = map[string]string{AnnotationVersion: version}
	p.Labels = map[string]string{LabelApp: "etcd", LabelCluster: testCluster, LabelNode: name}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.InitContainers = []corev1.Container{{Name: coreosCheckDNS, Image: "busybox:1.28.0-glibc", Command: []string{"/bin/sh", "-c", "while ( ! nslookup " + name + " ); do sleep 1; done"}}}
	p.Spec.Containers[0].Image = "quay.io/coreos/etcd:v" + version
	p.Status.ContainerStatuses[0].Image = p.Spec.Containers[0].Image
	return p
}

// coreosCluster is a running cluster of CoreOS members on version, m0 the
// leader, as status and etcd report it.
func coreosCluster(version string, versions ...string) *Observed {
	c := newCluster(len(versions), version)
	c.Status.Phase = v1beta2.PhaseRunning
	c.Status.CurrentVersion = version
	o := observed(c)
	o.Membership = memberList(1)
	for i, v := range versions {
		o.Pods[name(i)] = coreosMemberPod(name(i), v)
		m := member(uint64(i+1), name(i))
		m.Version = v
		o.Membership.Members = append(o.Membership.Members, m)
	}
	return o
}

func TestTakeOverCoreOSCluster(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		o      func() *Observed
		// adopted is ConditionAdopted's status and reason; waiting a part
		// of the message when the takeover waits.
		adopted, adoptedReason string
		waiting                string
	}{
		{
			name: "stable", reason: "every member a started voter with a Pod, all on one release: taken over as they are",
			o:       func() *Observed { return coreosCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16") },
			adopted: "True", adoptedReason: ReasonAdoptedFromCoreOS,
		},
		{
			name: "mid-upgrade", reason: "Pods on two releases: the CoreOS operator stopped during an upgrade",
			o:       func() *Observed { return coreosCluster("3.6.16", "3.5.21", "3.6.16", "3.6.16") },
			adopted: "False", adoptedReason: ReasonTakeoverWaiting, waiting: "left an upgrade under way",
		},
		{
			name: "member without a Pod", reason: "the CoreOS operator added a member and stopped before its Pod",
			o: func() *Observed {
				o := coreosCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16")
				o.Membership.Members = append(o.Membership.Members, unstarted(4, name(3), false))
				return o
			},
			adopted: "False", adoptedReason: ReasonTakeoverWaiting, waiting: "member " + name(3) + " was added but never started",
		},
		{
			name: "Pod without a member", reason: "the CoreOS operator removed a member and stopped before deleting its Pod",
			o: func() *Observed {
				o := coreosCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16")
				o.Membership.Members = o.Membership.Members[:2]
				return o
			},
			adopted: "False", adoptedReason: ReasonTakeoverWaiting, waiting: "Pod " + name(2) + " is not a member of etcd",
		},
		{
			name: "adopted before", reason: "Pods that carry the hook's hash were taken over by an earlier sync: no gate again",
			o: func() *Observed {
				o := coreosCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16")
				for _, p := range o.Pods {
					p.Annotations[AnnotationPodSpecHash] = podSpecHash(o.Cluster.Spec.WithDefaults())
				}
				return o
			},
			adopted: "True", adoptedReason: ReasonAdoptedFromCoreOS,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o()
			d := Plan(o)
			got := conditionOf(d.Status, v1beta2.ConditionAdopted)
			if string(got.Status) != tc.adopted || got.Reason != tc.adoptedReason || !strings.Contains(got.Message, tc.waiting) {
				t.Fatalf("%s: Adopted %s %s: %s; want %s %s mentioning %q", tc.reason, got.Status, got.Reason, got.Message, tc.adopted, tc.adoptedReason, tc.waiting)
			}
			if d.Action != nil {
				t.Errorf("%s: a takeover made a membership change: %s", tc.reason, d.Action)
			}
			// No member restarts: every CoreOS Pod is in the answer, with
			// its spec as it runs.
			for name, pod := range o.Pods {
				rendered := renderedPod(d.Children, name)
				if rendered == nil {
					if !containsChild(d.Children, plan.KindPod, name) {
						t.Errorf("%s: Pod %s left out of the answer (Metacontroller would delete it)", tc.reason, name)
					}
					continue
				}
				if diff := cmp.Diff(pod.Spec, rendered.Spec); diff != "" {
					t.Errorf("%s: Pod %s answered with another spec (-running +answer):\n%s", tc.reason, name, diff)
				}
			}
			stalled := conditionOf(d.Status, v1beta2.ConditionStalled)
			if waiting := tc.waiting != ""; waiting != (stalled.Status == metav1.ConditionTrue) {
				t.Errorf("%s: Stalled %s (%s), want True only while the takeover waits", tc.reason, stalled.Status, stalled.Reason)
			}
		})
	}
}

// TestTakeoverAddsHashInPlace: the first sync of a stable CoreOS cluster
// gives each member Pod the hook's labels and pod-spec hash, in place.
// From then on they are members like any other: a change of spec.pod, or
// of the rollout annotation, rolls them.
func TestTakeoverAddsHashInPlace(t *testing.T) {
	o := coreosCluster("3.6.16", "3.6.16", "3.6.16", "3.6.16")
	d := Plan(o)
	for name := range o.Pods {
		p := renderedPod(d.Children, name)
		if p == nil {
			t.Fatalf("Pod %s not rendered with new metadata", name)
		}
		if p.Annotations[AnnotationPodSpecHash] == "" || p.Annotations[AnnotationVersion] != "3.6.16" {
			t.Errorf("Pod %s annotations %v: want the pod-spec hash, and etcd.version kept", name, p.Annotations)
		}
	}

	// The next sync sees them adopted; the rollout annotation outdates
	// every one of them, and the rollout takes its first step (on an
	// emptyDir, a learner on the hook's own Pod spec).
	for name, pod := range o.Pods {
		pod.Annotations = renderedPod(d.Children, name).Annotations
		pod.Labels = renderedPod(d.Children, name).Labels
	}
	if d := Plan(o); d.Action != nil || conditionOf(d.Status, v1beta2.ConditionProgressing).Status != metav1.ConditionFalse {
		t.Fatalf("adopted members, no change asked: action %v, Progressing %+v; want nothing to do", d.Action, conditionOf(d.Status, v1beta2.ConditionProgressing))
	}
	o.Cluster.Annotations = map[string]string{AnnotationRollout: "2026-11-27"}
	d = Plan(o)
	if d.Action == nil || d.Action.Type != membership.ActionAddMember {
		t.Fatalf("after the rollout annotation: action %v (%s); want a learner added to replace a CoreOS member", d.Action, conditionOf(d.Status, v1beta2.ConditionProgressing).Message)
	}
	if msg := conditionOf(d.Status, v1beta2.ConditionProgressing).Message; !strings.Contains(msg, "rolling out the spec change") {
		t.Errorf("Progressing says %q, want the rollout", msg)
	}
}
