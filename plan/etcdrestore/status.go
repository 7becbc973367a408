package etcdrestore

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// GitOps health of an EtcdRestore: Ready, Reconciling and Stalled with
// kstatus's meaning (see plan/etcdcluster/health.go), derived from its Succeeded
// condition:
//   - Ready=True once the cluster runs on the restored data (Succeeded
//     True);
//   - Stalled=True when the restore will never happen without a person
//     (Succeeded False: the backup was unusable, the request was refused
//     or is invalid);
//   - Reconciling=True while the cluster carries it out: taking it up
//     (Pending), fetching and verifying the backup, restoring;
//   - otherwise it waits for an object that is not there yet (the
//     EtcdCluster, the Secret, the EtcdBackup), which a GitOps tool may
//     apply after it: Ready False alone, which kstatus reads InProgress.

// underWay are the Succeeded reasons of a restore the cluster is carrying
// out or about to.
var underWay = map[string]bool{
	ReasonPending:                    true,
	string(v1beta2.RestoreVerifying): true,
	string(v1beta2.RestoreRestoring): true,
}

// health returns the kstatus conditions that go with the Succeeded
// condition succeeded.
func health(r *v1beta2.EtcdRestore, succeeded v1beta2.ClusterCondition, now time.Time) []v1beta2.ClusterCondition {
	type cond struct {
		status          metav1.ConditionStatus
		reason, message string
	}
	same := cond{metav1.ConditionFalse, succeeded.Reason, succeeded.Message}
	ready, reconciling, stalled := same, same, cond{metav1.ConditionFalse, "AsExpected", "nothing needs a person"}
	switch {
	case succeeded.Status == metav1.ConditionTrue:
		ready.status = metav1.ConditionTrue
	case succeeded.Status == metav1.ConditionFalse:
		reconciling.message = "the restore will not be carried out; see the Stalled condition"
		stalled = cond{metav1.ConditionTrue, succeeded.Reason, succeeded.Message}
	case underWay[succeeded.Reason]:
		reconciling.status = metav1.ConditionTrue
	}
	return []v1beta2.ClusterCondition{
		conditionOf(r, v1beta2.ConditionReady, ready.status, ready.reason, ready.message, now),
		conditionOf(r, v1beta2.ConditionReconciling, reconciling.status, reconciling.reason, reconciling.message, now),
		conditionOf(r, v1beta2.ConditionStalled, stalled.status, stalled.reason, stalled.message, now),
	}
}

// conditionOf keeps the previous transition time while the status holds.
func conditionOf(r *v1beta2.EtcdRestore, t v1beta2.ConditionType, status metav1.ConditionStatus, reason, msg string, now time.Time) v1beta2.ClusterCondition {
	c := v1beta2.ClusterCondition{Type: t, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(now.UTC().Truncate(time.Second))}
	for _, prev := range r.Status.Conditions {
		if prev.Type == t && prev.Status == status && !prev.LastTransitionTime.IsZero() {
			c.LastTransitionTime = prev.LastTransitionTime
		}
	}
	return c
}
