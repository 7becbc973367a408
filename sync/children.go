package sync

import (
	"encoding/json"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// Child is one object of the answer: a typed object the hook renders, or
// the raw configuration of an observed child that the hook keeps as it is.
type Child struct {
	Kind string
	Name string
	// Object is a *corev1.Pod, *corev1.Service,
	// *corev1.PersistentVolumeClaim, *policyv1.PodDisruptionBudget, or a
	// json.RawMessage holding a kept child's last applied configuration.
	Object any
}

// Kinds of children, as Metacontroller keys them without the version.
const (
	KindPod     = "Pod"
	KindService = "Service"
	KindPVC     = "PersistentVolumeClaim"
	KindPDB     = "PodDisruptionBudget"
)

// LastAppliedAnnotation is where Metacontroller records what a hook last
// asked for. Answering with exactly that makes Metacontroller's three-way
// merge a no-op, which is how a child is kept unchanged.
const LastAppliedAnnotation = "metacontroller.k8s.io/last-applied-configuration"

// keep returns the child as it was last asked for. An object without the
// annotation was not created through Metacontroller's apply; its observed
// metadata and spec are the closest stand-in.
func keep(kind, name string, annotations map[string]string, fallback func() any) Child {
	if raw, ok := annotations[LastAppliedAnnotation]; ok && json.Valid([]byte(raw)) {
		return Child{Kind: kind, Name: name, Object: json.RawMessage(raw)}
	}
	return Child{Kind: kind, Name: name, Object: fallback()}
}

func sortChildren(children []Child) {
	rank := map[string]int{KindService: 0, KindPDB: 1, KindPVC: 2, KindPod: 3}
	sort.SliceStable(children, func(i, j int) bool {
		if children[i].Kind != children[j].Kind {
			return rank[children[i].Kind] < rank[children[j].Kind]
		}
		return children[i].Name < children[j].Name
	})
}

// KeepPod is a Pod child kept exactly as it was last applied, for planners
// of other kinds.
func KeepPod(p *corev1.Pod) Child { return keepPod(p) }
