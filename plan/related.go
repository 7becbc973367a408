package plan

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RelatedResource is one rule of a customize hook's answer: objects of
// one resource that Metacontroller then sends in every sync request's
// related map, and whose changes trigger a sync. Names or a label
// selector, never both.
type RelatedResource struct {
	APIVersion    string                `json:"apiVersion"`
	Resource      string                `json:"resource"`
	Namespace     string                `json:"namespace,omitempty"`
	Names         []string              `json:"names,omitempty"`
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}
