package etcdcluster

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// ClientServiceName is the Service clients connect to.

// peerService is headless and publishes members before they are ready:
// a member's DNS name must resolve while it is still joining, or it can
// never catch up and become ready.
//
// It also carries the copy of the bootstrap record (see bootstrap.go).
//
// text is the record's JSON when the caller has it; "" encodes rec.
func peerService(c *v1beta2.EtcdCluster, rec *v1beta2.BootstrapStatus, text string) *corev1.Service {
	var annotations map[string]string
	if rec != nil {
		if text == "" {
			record, _ := json.Marshal(rec)
			text = string(record)
		}
		annotations = map[string]string{AnnotationBootstrap: text}
	}
	// Labels and selector share one map: the answer is only encoded.
	labels := selectorLabels(c.Name)
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 labels,
			Ports: []corev1.ServicePort{
				{Name: "client", Port: plan.ClientPort, TargetPort: intstr.FromInt32(plan.ClientPort), Protocol: corev1.ProtocolTCP},
				{Name: "peer", Port: plan.PeerPort, TargetPort: intstr.FromInt32(plan.PeerPort), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// clientService sends clients to the members whose Pods are ready and
// carry LabelServing (see serving.go). servingOnly false renders the
// selector of earlier hook releases, which every member Pod matches: a
// running cluster keeps it until its Pods carry the label.
func clientService(c *v1beta2.EtcdCluster, servingOnly bool) *corev1.Service {
	labels := selectorLabels(c.Name)
	selector := labels
	if servingOnly {
		selector = selectorLabels(c.Name)
		selector[LabelServing] = "true"
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: plan.ClientServiceName(c.Name), Namespace: c.Namespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports: []corev1.ServicePort{
				{Name: "client", Port: plan.ClientPort, TargetPort: intstr.FromInt32(plan.ClientPort), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// disruptionBudget lets voluntary disruptions (drains) take one member at
// a time. A single member on an emptyDir allows none: evicting it would
// destroy the only copy of the data.
func disruptionBudget(c *v1beta2.EtcdCluster, spec v1beta2.ClusterSpec) *policyv1.PodDisruptionBudget {
	unavailable := intstr.FromInt32(1)
	if spec.Size <= 1 && !spec.Persistent() {
		unavailable = intstr.FromInt32(0)
	}
	labels := selectorLabels(c.Name)
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, Labels: labels},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &unavailable,
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
		},
	}
}

// memberClaim is a member's data volume. It is named after the member, so
// it outlives the member's Pod and is found again when the Pod returns.
func memberClaim(c *v1beta2.EtcdCluster, spec v1beta2.ClusterSpec, member, seed string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      member,
			Namespace: c.Namespace,
			Labels:    memberLabels(c.Name, member, nil, false),
			// Like a member Pod, a claim names its cluster's seed, so that
			// the claims of a cluster a restore replaced are told apart.
			Annotations: map[string]string{AnnotationSeedMember: seed},
		},
		Spec: *spec.Pod.PersistentVolumeClaimSpec,
	}
}
