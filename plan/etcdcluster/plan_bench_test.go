package etcdcluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// BenchmarkPlanSteady is the planner's share of a steady sync: a converged
// cluster, every member ready and answering, and every member Pod last
// applied as the planner answers it (as Metacontroller records it), so
// that the answer keeps every child as it is.
func BenchmarkPlanSteady(b *testing.B) {
	for _, n := range []int{1, 3, 5, 7} {
		o := steadyObservation(b, n)
		settle(b, o)
		d := Plan(o)
		for _, c := range d.Children {
			if _, kept := c.Object.(json.RawMessage); c.Kind == plan.KindPod && !kept {
				b.Fatalf("%d members: Pod %s is not kept as last applied", n, c.Name)
			}
		}
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Plan(o)
			}
		})
	}
}

// BenchmarkPlanSteadyDerived is BenchmarkPlanSteady once Derive has seen
// the observation: what of a steady sync's planning follows etcd's read
// (the reconciler derives while the read is in flight).
func BenchmarkPlanSteadyDerived(b *testing.B) {
	for _, n := range []int{1, 3, 5, 7} {
		o := steadyObservation(b, n)
		settle(b, o)
		Derive(o)
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Plan(o)
			}
		})
	}
}

// BenchmarkPlanSteadyTLS is BenchmarkPlanSteady for a cluster of three
// members that serve TLS, from the Secrets the user issued (static) and
// from those the hook issued (auto): a sync that issues nothing must cost
// no more with auto, though it answers the four Secrets every time.
func BenchmarkPlanSteadyTLS(b *testing.B) {
	for _, tc := range []struct {
		name string
		o    func(testing.TB) *Observed
	}{{"static", steadyStaticTLS}, {"auto", steadyAutoTLS}} {
		o := tc.o(b)
		settle(b, o)
		if d := Plan(o); d.Action != nil || !d.Settled(o) {
			b.Fatalf("%s: not a steady cluster: %+v", tc.name, d.Status.Conditions)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Plan(o)
			}
		})
	}
}

func steadyStaticTLS(tb testing.TB) *Observed {
	c := tlsCluster(3)
	c.Status.Phase = v1beta2.PhaseRunning
	o := withSecrets(observed(c), issued(tb))
	o.Membership = memberList(1)
	for i := range 3 {
		pod := onSpec(readyPod(name(i)), c.Spec)
		pod.UID = types.UID(fmt.Sprintf("pod-uid-%d", i))
		addTLS(pod, c.TLSSecrets())
		o.Pods[name(i)] = pod
		o.Membership.Members = append(o.Membership.Members, member(uint64(i+1), name(i)))
	}
	return o
}

func steadyAutoTLS(tb testing.TB) *Observed {
	o := runningAutoOn(tb, 3, false)
	for i := range 3 {
		o.Pods[name(i)].UID = types.UID(fmt.Sprintf("pod-uid-%d", i))
	}
	return o
}

// BenchmarkPlanRelabel is BenchmarkPlanSteady on Pods last applied without
// the labels and annotations the planner gives them (LabelServing, the
// pod-spec hash): every Pod is answered with them, as in the first sync
// after a hook release that added them. BenchmarkPlanSteady measured this
// before it settled its Pods.
func BenchmarkPlanRelabel(b *testing.B) {
	for _, n := range []int{1, 3, 5, 7} {
		o := steadyObservation(b, n)
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Plan(o)
			}
		})
	}
}

func steadyObservation(b *testing.B, n int) *Observed {
	o := observed(newCluster(n, "3.6.16"))
	o.Cluster.Status.Phase = v1beta2.PhaseRunning
	o.Membership = memberList(1)
	for i := range n {
		o.Pods[name(i)] = readyPod(name(i))
		// As the API server sends them: the memo of last applied
		// metadata is kept by UID.
		o.Pods[name(i)].UID = types.UID(fmt.Sprintf("pod-uid-%d", i))
		o.Membership.Members = append(o.Membership.Members, member(uint64(i+1), name(i)))
	}
	if d := Plan(o); !d.Settled(o) {
		b.Fatalf("%d members: not a steady cluster: %+v", n, d.Status)
	}
	return o
}

// settle gives every member Pod the planner's answer for it as its last
// applied configuration, and that answer's labels and annotations, as
// Metacontroller applies an answer.
func settle(b testing.TB, o *Observed) {
	for _, c := range Plan(o).Children {
		pod, ok := c.Object.(*corev1.Pod)
		if c.Kind != plan.KindPod || !ok {
			continue
		}
		// As the hook encodes a Pod child (hooks/response.go).
		applied, err := json.Marshal(struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
			Spec       any               `json:"spec,omitempty"`
		}{"v1", "Pod", pod.ObjectMeta, pod.Spec})
		if err != nil {
			b.Fatal(err)
		}
		observed := o.Pods[c.Name]
		observed.Labels = maps.Clone(pod.Labels)
		observed.Annotations = maps.Clone(pod.Annotations)
		observed.Annotations[plan.LastAppliedAnnotation] = string(applied)
	}
}
