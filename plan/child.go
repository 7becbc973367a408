package plan

import (
	"encoding/json"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Child is one object of the answer: a typed object the hook renders, or
// the raw configuration of an observed child that the hook keeps as it is.
type Child struct {
	Kind string
	Name string
	// Object is a *corev1.Pod, *corev1.Service, *corev1.Secret,
	// *corev1.PersistentVolumeClaim, *policyv1.PodDisruptionBudget,
	// *networkingv1.NetworkPolicy, or a
	// json.RawMessage holding a kept child's last applied configuration.
	Object any
}

// Kinds of children, as Metacontroller keys them without the version.
const (
	KindPod     = "Pod"
	KindService = "Service"
	KindPVC     = "PersistentVolumeClaim"
	KindPDB     = "PodDisruptionBudget"
	KindSecret  = "Secret"
	// KindNetworkPolicy is networking.k8s.io/v1's.
	KindNetworkPolicy = "NetworkPolicy"
)

// LastAppliedAnnotation is where Metacontroller records what a hook last
// asked for. Answering with exactly that makes Metacontroller's three-way
// merge a no-op, which is how a child is kept unchanged.
const LastAppliedAnnotation = "metacontroller.k8s.io/last-applied-configuration"

// Keep returns the child as it was last asked for. An object without the
// annotation was not created through Metacontroller's apply; its observed
// metadata and spec are the closest stand-in.
func Keep(kind, name string, annotations map[string]string, fallback func() any) Child {
	if raw, ok := annotations[LastAppliedAnnotation]; ok && json.Valid([]byte(raw)) {
		return Child{Kind: kind, Name: name, Object: json.RawMessage(raw)}
	}
	return Child{Kind: kind, Name: name, Object: fallback()}
}

// SortChildren orders an answer: Secrets and Services first and Pods
// last, each by name.
func SortChildren(children []Child) {
	rank := map[string]int{KindSecret: -1, KindService: 0, KindNetworkPolicy: 1, KindPDB: 1, KindPVC: 2, KindPod: 3}
	sort.SliceStable(children, func(i, j int) bool {
		if children[i].Kind != children[j].Kind {
			return rank[children[i].Kind] < rank[children[j].Kind]
		}
		return children[i].Name < children[j].Name
	})
}

// KeepPod is a Pod child kept exactly as it was last applied.
func KeepPod(p *corev1.Pod) Child {
	return Keep(KindPod, p.Name, p.Annotations, func() any {
		return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: StrippedMeta(p.ObjectMeta), Spec: p.Spec}
	})
}

// KeepClaim is a PersistentVolumeClaim child kept exactly as it was last
// applied. One the hook did not create (no annotation) is kept as its
// metadata and spec: its status is the cluster's to write.
func KeepClaim(c *corev1.PersistentVolumeClaim) Child {
	return Keep(KindPVC, c.Name, c.Annotations, func() any {
		return &corev1.PersistentVolumeClaim{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"}, ObjectMeta: StrippedMeta(c.ObjectMeta), Spec: c.Spec}
	})
}

// StrippedMeta keeps the parts of observed metadata a hook may own.
func StrippedMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations}
}
