package etcdcluster

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// Settled reports whether the decision leaves the cluster as it is: no
// membership step, nothing in progress, and exactly the observed member
// Pods and PVCs, none added and none dropped.
//
// Only such a decision may rest on a member's local copy of the member
// list, which can lag etcd's latest change by a moment: at worst the next
// sync sees the change. Any other decision adds, drops or changes
// something on the strength of the list, and is made again on the list
// read through the quorum.
func (d Decision) Settled(o *Observed) bool {
	if d.Action != nil {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == v1beta2.ConditionProgressing && c.Status != metav1.ConditionFalse {
			return false
		}
	}
	pods, pvcs := 0, 0
	for _, c := range d.Children {
		switch c.Kind {
		case plan.KindPod:
			if _, ok := o.Pods[c.Name]; !ok {
				return false
			}
			pods++
		case plan.KindPVC:
			if _, ok := o.PVCs[c.Name]; !ok {
				return false
			}
			pvcs++
		}
	}
	return pods == len(o.Pods) && pvcs == len(o.PVCs)
}
