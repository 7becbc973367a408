package hooks

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/plan/etcdcluster"

	"github.com/etcdhook/etcd-hook/plan"
)

// response is the answer to a sync or finalize request, of either kind.
type response struct {
	Status any `json:"status"`
	// Children is always present: a missing or null list would make
	// Metacontroller delete every child.
	Children           []any   `json:"children"`
	ResyncAfterSeconds float64 `json:"resyncAfterSeconds,omitempty"`
	Finalized          *bool   `json:"finalized,omitempty"`
}

// object is a child without its status: the status of a child is not the
// hook's to set, and an empty one would go into the last applied
// configuration for nothing.
type object struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       any               `json:"spec,omitempty"`
}

// Encode renders a decision. finalize selects the finalize hook's answer,
// which carries the finalized field.
func Encode(d etcdcluster.Decision, finalize bool) ([]byte, error) {
	return encodeAnswer(&d.Status, d.Children, d.ResyncAfter, finalize, d.Finalized)
}

// encodeAnswer renders the answer of any parent kind's planner.
func encodeAnswer(status any, children []plan.Child, resync time.Duration, finalize, finalized bool) ([]byte, error) {
	resp := response{Status: status, Children: make([]any, 0, len(children))}
	if resync > 0 {
		resp.ResyncAfterSeconds = math.Round(resync.Seconds()*1000) / 1000
	}
	if finalize {
		resp.Finalized = &finalized
	}
	for _, c := range children {
		wire, err := wireObject(c)
		if err != nil {
			return nil, err
		}
		resp.Children = append(resp.Children, wire)
	}
	return json.Marshal(resp)
}

// secretObject is a Secret child on the wire: a Secret has no spec.
type secretObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Type       corev1.SecretType `json:"type,omitempty"`
	Data       map[string][]byte `json:"data,omitempty"`
}

func wireObject(c plan.Child) (any, error) {
	switch obj := c.Object.(type) {
	case json.RawMessage:
		return obj, nil
	case *corev1.Pod:
		return object{"v1", "Pod", obj.ObjectMeta, obj.Spec}, nil
	case *corev1.Service:
		return object{"v1", "Service", obj.ObjectMeta, obj.Spec}, nil
	case *corev1.PersistentVolumeClaim:
		return object{"v1", "PersistentVolumeClaim", obj.ObjectMeta, obj.Spec}, nil
	case *policyv1.PodDisruptionBudget:
		return object{"policy/v1", "PodDisruptionBudget", obj.ObjectMeta, obj.Spec}, nil
	case *networkingv1.NetworkPolicy:
		return object{"networking.k8s.io/v1", "NetworkPolicy", obj.ObjectMeta, obj.Spec}, nil
	case *corev1.Secret:
		return secretObject{"v1", "Secret", obj.ObjectMeta, obj.Type, obj.Data}, nil
	}
	return nil, fmt.Errorf("child %s %q has unexpected type %T", c.Kind, c.Name, c.Object)
}
