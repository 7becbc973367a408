package etcdcluster

import (
	"encoding/json"
	"maps"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/plan"
)

// A running member's Pod between rollouts: kept exactly as last applied
// when its metadata is what the spec asks, relabelled in place otherwise.

// currentPod is a running member's Pod as last applied, with the labels
// and annotations the spec asks for now, and LabelServing as the member's
// role says: Metacontroller patches them in place, and the member does
// not restart.
//
// In a steady cluster they are already what the Pod was last applied
// with, and the Pod is kept exactly as it was: that is seen from the
// metadata of its last applied configuration alone, which costs a
// fraction of decoding the whole Pod (most of a steady plan's work when it
// did). The whole Pod is decoded only when its metadata changes.
func (p *planner) currentPod(pod *corev1.Pod) plan.Child {
	if raw, ok := pod.Annotations[plan.LastAppliedAnnotation]; ok {
		// ok: the configuration is valid JSON, which plan.KeepPod keeps
		// as it is, and its metadata is what decoding the whole Pod gives
		// (podObject). Otherwise currentPodChanged decides.
		if applied, ok := p.appliedMetaOf(pod, raw); ok {
			b := []byte(raw)
			kept := plan.Child{Kind: plan.KindPod, Name: pod.Name, Object: json.RawMessage(b)}
			m := applied.Metadata
			if p.isCurrentMeta(pod, m.Labels, m.Annotations) {
				return kept
			}
			labels, annotations := p.currentMeta(pod, m.Annotations)
			if maps.Equal(labels, m.Labels) && maps.Equal(annotations, m.Annotations) {
				return kept
			}
			out := &corev1.Pod{}
			// Unmarshal keeps nothing of b and leaves it as it is.
			if json.Unmarshal(b, out) != nil {
				return kept
			}
			out.APIVersion, out.Kind = "v1", "Pod"
			out.Labels, out.Annotations = labels, annotations
			return plan.Child{Kind: plan.KindPod, Name: pod.Name, Object: out}
		}
	} else if p.isCurrentMeta(pod, pod.Labels, pod.Annotations) {
		// plan.KeepPod's stand-in carries the observed metadata.
		return plan.KeepPod(pod)
	}
	return p.currentPodChanged(pod)
}

// isCurrentMeta: labels and annotations are what currentMeta gives for
// them, told without making currentMeta's maps (a steady plan made two
// maps a member for this). TestIsCurrentMetaAgreesWithCurrentMeta holds
// the two to the same answer; currentPod still compares the maps before
// it changes a Pod.
func (p *planner) isCurrentMeta(pod *corev1.Pod, labels, annotations map[string]string) bool {
	// The labels: spec.pod's without LabelServing, then the member's own
	// three, then LabelServing as the member's role says.
	var policyLabels, policyAnnotations map[string]string
	if pol := p.spec.Pod; pol != nil {
		policyLabels, policyAnnotations = pol.Labels, pol.Annotations
	}
	want := 3
	for k, v := range policyLabels {
		switch k {
		case LabelServing, LabelApp, LabelCluster, LabelNode:
			continue
		}
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
		want++
	}
	serving, hasServing := labels[LabelServing]
	if p.servingPod(pod) {
		if !hasServing || serving != "true" {
			return false
		}
		want++
	} else if hasServing {
		return false
	}
	if len(labels) != want || !hasValue(labels, LabelApp, "etcd") || !hasValue(labels, LabelCluster, p.o.Cluster.Name) || !hasValue(labels, LabelNode, pod.Name) {
		return false
	}
	// The annotations: spec.pod's, with the hook's own as they were
	// applied, which carry the pod-spec hash. Every one applied is
	// then either the hook's own or spec.pod's with its value, and every
	// one of spec.pod's is there.
	if annotations[AnnotationPodSpecHash] == "" {
		return false
	}
	for k, v := range annotations {
		if hookAnnotation(k) {
			continue
		}
		if pv, ok := policyAnnotations[k]; !ok || pv != v {
			return false
		}
	}
	for k := range policyAnnotations {
		if _, ok := annotations[k]; !ok {
			return false
		}
	}
	return true
}

func hasValue(m map[string]string, key, value string) bool {
	v, ok := m[key]
	return ok && v == value
}

// currentMeta is the labels and annotations a running member's Pod is
// answered with, given the annotations it was last applied with.
func (p *planner) currentMeta(pod *corev1.Pod, applied map[string]string) (labels, annotations map[string]string) {
	labels = memberLabels(p.o.Cluster.Name, pod.Name, p.spec.Pod, p.servingPod(pod))
	annotations = map[string]string{}
	if pol := p.spec.Pod; pol != nil {
		maps.Copy(annotations, pol.Annotations)
	}
	for k, v := range applied {
		if hookAnnotation(k) {
			annotations[k] = v
		}
	}
	if annotations[AnnotationPodSpecHash] == "" {
		annotations[AnnotationPodSpecHash] = p.podHash()
	}
	return labels, annotations
}

// currentPodChanged is currentPod decoding the whole Pod: the Pod as last
// applied, with the labels and annotations currentMeta gives, or as it
// was when they are what it has (or it does not decode).
func (p *planner) currentPodChanged(pod *corev1.Pod) plan.Child {
	kept := plan.KeepPod(pod)
	out, ok := podObject(kept)
	if !ok {
		return kept
	}
	labels, annotations := p.currentMeta(pod, out.Annotations)
	if maps.Equal(labels, out.Labels) && maps.Equal(annotations, out.Annotations) {
		return kept
	}
	out.Labels, out.Annotations = labels, annotations
	return plan.Child{Kind: plan.KindPod, Name: pod.Name, Object: out}
}

// podObject decodes a kept Pod child into a Pod that may be changed.
func podObject(c plan.Child) (*corev1.Pod, bool) {
	var out corev1.Pod
	switch obj := c.Object.(type) {
	case json.RawMessage:
		if err := json.Unmarshal(obj, &out); err != nil {
			return nil, false
		}
	case *corev1.Pod:
		out = *obj.DeepCopy()
	default:
		return nil, false
	}
	out.APIVersion, out.Kind = "v1", "Pod"
	return &out, true
}
