package etcdbackup

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// GitOps health of an EtcdBackup: Ready, Reconciling and Stalled with
// kstatus's meaning, as the cluster has them (see plan/etcdcluster/health.go).
//   - Ready=True once the last finished run succeeded (for a one-shot
//     backup, a run of the current generation). A periodic backup stays
//     Ready through its routine runs: a run every hour is no reason for a
//     GitOps tool to wait.
//   - Reconciling=True while a run is in flight that the object waits
//     for: its first backup, a one-shot backup of a changed spec, or a
//     retry after a failure.
//   - Stalled=True when runs cannot succeed without a person: an invalid
//     spec, https endpoints without a client certificate, a Secret that is
//     there but unusable, or StalledAfterFailures failed runs in a row
//     (runs go on being retried meanwhile). A Secret, claim or EtcdCluster
//     that does not exist is waited for instead: a GitOps tool may apply
//     it after the EtcdBackup.

// StalledAfterFailures is how many failed runs in a row make a backup
// Stalled: one failure may be a store's blip, and the retries' backoff
// (10 s, 20 s, 40 s) has passed it by the third.
const StalledAfterFailures = 3

// Reasons of the kstatus conditions beyond the planner's.
const (
	ReasonWaiting = "WaitingForObject"
)

// health returns the kstatus conditions of st, the status this sync
// renders.
func (p *planner) health(st v1beta2.BackupStatus) []v1beta2.ClusterCondition {
	ready, reconciling, stalled := p.healthConditions(st)
	return []v1beta2.ClusterCondition{
		p.condition(v1beta2.ConditionReady, ready),
		p.condition(v1beta2.ConditionReconciling, reconciling),
		p.condition(v1beta2.ConditionStalled, stalled),
	}
}

func (p *planner) healthConditions(st v1beta2.BackupStatus) (ready, reconciling, stalled cond) {
	notStalled := cond{metav1.ConditionFalse, ReasonAsExpected, "nothing needs a person"}
	last := st.LastRun
	if reason, msg := p.stalledBy(st); reason != "" {
		return cond{metav1.ConditionFalse, reason, msg},
			cond{metav1.ConditionFalse, reason, "runs cannot succeed without a person; see the Stalled condition"},
			cond{metav1.ConditionTrue, reason, msg}
	}
	if p.degraded.status == metav1.ConditionTrue && p.degraded.reason != ReasonBackupFailed {
		// Blocked on an object that is not there (yet).
		waiting := cond{metav1.ConditionFalse, ReasonWaiting, p.degraded.message}
		return waiting, waiting, notStalled
	}
	idle := cond{metav1.ConditionFalse, p.progressing.reason, p.progressing.message}
	if p.o.Backup.Spec.BackupPolicy.Continuous() {
		// Ready is BackupReady; the archiver starting, or taking the
		// chain's first snapshot, is work the object waits for.
		switch p.ready.reason {
		case ReasonArchiving:
			return p.ready, idle, notStalled
		case ReasonArchiverStart, ReasonSnapshotPending:
			return cond{metav1.ConditionFalse, p.ready.reason, p.ready.message}, cond{metav1.ConditionTrue, p.ready.reason, p.ready.message}, notStalled
		}
		return cond{metav1.ConditionFalse, p.ready.reason, p.ready.message}, idle, notStalled
	}
	if p.satisfied(st) {
		msg := "the last backup succeeded"
		if b := st.LastBackup; b != nil {
			msg = fmt.Sprintf("the last backup, %s at revision %d, succeeded at %s", b.Location, b.Revision, b.Time.UTC().Format(time.RFC3339))
		}
		return cond{metav1.ConditionTrue, ReasonDone, msg}, idle, notStalled
	}
	if p.progressing.status == metav1.ConditionTrue {
		running := cond{metav1.ConditionTrue, p.progressing.reason, p.progressing.message}
		return cond{metav1.ConditionFalse, p.progressing.reason, p.progressing.message}, running, notStalled
	}
	if last != nil && last.End != nil && !last.Succeeded {
		failed := fmt.Sprintf("backup %s failed: %s; %s", last.Name, last.Reason, p.progressing.message)
		return cond{metav1.ConditionFalse, ReasonBackupFailed, failed}, idle, notStalled
	}
	return cond{metav1.ConditionFalse, p.progressing.reason, p.progressing.message}, idle, notStalled
}

// satisfied: the last finished run succeeded, and for a one-shot backup
// it was a run of the current spec.
func (p *planner) satisfied(st v1beta2.BackupStatus) bool {
	if !st.Succeeded || st.LastSuccessDate == nil {
		return false
	}
	if p.policy().BackupIntervalInSecond > 0 {
		return true
	}
	last := st.LastRun
	return last != nil && last.End != nil && last.Succeeded && last.Generation == p.o.Backup.Generation
}

// stalledBy names what keeps every run from succeeding, or "".
func (p *planner) stalledBy(st v1beta2.BackupStatus) (reason, message string) {
	d := p.degraded
	if d.status == metav1.ConditionTrue {
		switch d.reason {
		case ReasonInvalidSpec, ReasonClientTLSMissing, ReasonKeyInvalid:
			return d.reason, d.message
		case ReasonSecretInvalid, ReasonClaimNotFound, ReasonClusterNotFound:
			if !p.referenceMissing() {
				return d.reason, d.message
			}
		}
	}
	if last := st.LastRun; last != nil && last.End != nil && !last.Succeeded && last.ConsecutiveFailures >= StalledAfterFailures {
		return ReasonBackupFailed, fmt.Sprintf("%d runs failed in a row, the last (%s): %s; runs are retried meanwhile", last.ConsecutiveFailures, last.Name, last.Reason)
	}
	if last := st.LastRun; last != nil && last.End == nil && !st.Succeeded && last.ConsecutiveFailures >= StalledAfterFailures {
		return ReasonBackupFailed, fmt.Sprintf("%d runs failed in a row, and %s retries: %s", last.ConsecutiveFailures, last.Name, st.Reason)
	}
	return "", ""
}

// referenceMissing: an object the spec names does not exist (or is being
// deleted): the S3 Secret, the claim, the EtcdCluster, the clientTLSSecret,
// the encryption key's Secret.
func (p *planner) referenceMissing() bool {
	spec := p.o.Backup.Spec
	if spec.StorageType == v1beta2.BackupStoragePVC && spec.PVC != nil {
		if c, ok := p.o.Claims[spec.PVC.ClaimName]; !ok || c.DeletionTimestamp != nil {
			return true
		}
	}
	if spec.StorageType == v1beta2.BackupStorageS3 && spec.S3 != nil {
		if _, ok := p.o.Secrets[spec.S3.AWSSecret]; !ok {
			return true
		}
	}
	if spec.ClusterName != "" {
		if _, ok := p.o.Clusters[spec.ClusterName]; !ok {
			return true
		}
	}
	for _, name := range []string{spec.ClientTLSSecret, encryptionSecret(spec)} {
		if _, ok := p.o.Secrets[name]; name != "" && !ok {
			return true
		}
	}
	return false
}

// condition renders one condition, its lastTransitionTime carried over
// while its status holds, so that a steady status does not change.
func (p *planner) condition(t v1beta2.ConditionType, c cond) v1beta2.ClusterCondition {
	out := v1beta2.ClusterCondition{Type: t, Status: c.status, Reason: c.reason, Message: c.message,
		LastTransitionTime: metav1.NewTime(p.o.Now.UTC().Truncate(time.Second))}
	for _, prev := range p.o.Backup.Status.Conditions {
		if prev.Type == t && prev.Status == out.Status && !prev.LastTransitionTime.IsZero() {
			out.LastTransitionTime = prev.LastTransitionTime
		}
	}
	return out
}
