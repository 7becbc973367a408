package etcdrestore

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// Observed is everything one sync of an EtcdRestore knows.
type Observed struct {
	Restore    *v1beta2.EtcdRestore
	SpecErrors field.ErrorList
	// Clusters, Secrets and Backups are the related objects of the same
	// namespace, by name: the EtcdCluster restored, the S3 Secret and the
	// EtcdBackup named as the source.
	Clusters map[string]*v1beta2.EtcdCluster
	Secrets  map[string]*corev1.Secret
	Backups  map[string]*v1beta2.EtcdBackup
	Now      time.Time
}

// Decision is the answer to one sync.
type Decision struct {
	Status      v1beta2.RestoreStatus
	ResyncAfter time.Duration
}

// Condition reasons, part of the API.
const (
	ReasonInvalidSpec     = "InvalidSpec"
	ReasonClusterNotFound = "ClusterNotFound"
	ReasonSecretInvalid   = "SecretInvalid"
	ReasonBackupNotFound  = "BackupNotFound"
	ReasonPending         = "Pending"
	ReasonCompleted       = "Completed"
)

// ConditionSucceeded is the EtcdRestore's one condition: True once the
// cluster runs on the restored data, False when it never will (with the
// reason), Unknown while it may.
const ConditionSucceeded v1beta2.ConditionType = "Succeeded"

// RequestID is how the cluster's status names a request made by an
// EtcdRestore.
func RequestID(r *v1beta2.EtcdRestore) string { return "EtcdRestore/" + string(r.UID) }

// Plan decides one sync.
func Plan(o *Observed) Decision {
	r := o.Restore
	st := v1beta2.RestoreStatus{ObservedGeneration: r.Generation, Phase: r.Status.Phase}
	cluster := o.Clusters[r.Spec.EtcdCluster.Name]
	if cluster != nil {
		st.ClusterUID = string(cluster.UID)
	}
	set := func(phase v1beta2.RestorePhase, status metav1.ConditionStatus, reason, msg string) Decision {
		st.Phase = phase
		st.Succeeded = status == metav1.ConditionTrue
		if !st.Succeeded {
			st.Reason = msg
		}
		succeeded := condition(r, status, reason, msg, o.Now)
		st.Conditions = append([]v1beta2.ClusterCondition{succeeded}, health(r, succeeded, o.Now)...)
		d := Decision{Status: st}
		if status == metav1.ConditionUnknown {
			d.ResyncAfter = 10 * time.Second
		}
		return d
	}

	// What the cluster says wins: it is the one that acts. Its bootstrap
	// record is the proof of a commit, and outranks a phase from before
	// it: a cluster status written by an earlier hook release could say
	// Verifying after the commit (see the cluster planner's
	// carriedRestoreStatus).
	if cluster != nil {
		id := RequestID(r)
		b := cluster.Status.Bootstrap
		committed := b != nil && b.Restore != nil && b.Restore.Request == id
		if cs := cluster.Status.Restore; cs != nil && cs.Request == id {
			st.Location, st.Revision, st.EtcdVersion, st.RestoredAt = cs.Location, cs.Revision, cs.EtcdVersion, cs.RestoredAt
			switch {
			case cs.Phase == v1beta2.RestoreCompleted:
				return set(cs.Phase, metav1.ConditionTrue, ReasonCompleted, cs.Message)
			case cs.Phase == v1beta2.RestoreFailed || cs.Phase == v1beta2.RestoreRefused:
				return set(cs.Phase, metav1.ConditionFalse, string(cs.Phase), cs.Message)
			case committed && cs.Phase != v1beta2.RestoreRestoring:
				st.RestoredAt = b.Restore.RestoredAt
				return set(v1beta2.RestoreRestoring, metav1.ConditionUnknown, string(v1beta2.RestoreRestoring),
					fmt.Sprintf("the cluster committed the restore from %s and is starting its members on the restored data", b.Restore.Source.Location()))
			default:
				return set(cs.Phase, metav1.ConditionUnknown, string(cs.Phase), cs.Message)
			}
		}
		if committed {
			// Done, though the cluster's status.restore has moved on to a
			// later request.
			st.Location, st.Revision, st.EtcdVersion, st.RestoredAt = b.Restore.Source.Location(), b.Restore.Revision, b.Restore.EtcdVersion, b.Restore.RestoredAt
			return set(v1beta2.RestoreCompleted, metav1.ConditionTrue, ReasonCompleted, "the cluster was restored from "+st.Location)
		}
	}
	if len(o.SpecErrors) > 0 {
		return set(v1beta2.RestoreRefused, metav1.ConditionFalse, ReasonInvalidSpec, "the EtcdRestore is invalid: "+o.SpecErrors.ToAggregate().Error())
	}
	if cluster == nil {
		return set("", metav1.ConditionUnknown, ReasonClusterNotFound, fmt.Sprintf(
			"there is no EtcdCluster %q in namespace %s: create it, and it starts from this restore, or delete this EtcdRestore", r.Spec.EtcdCluster.Name, r.Namespace))
	}
	if s3 := r.Spec.S3; r.Spec.Backup == nil && r.Spec.BackupStorageType == v1beta2.BackupStorageS3 && s3 != nil {
		secret, ok := o.Secrets[s3.AWSSecret]
		switch {
		case !ok:
			return set("", metav1.ConditionUnknown, ReasonSecretInvalid, fmt.Sprintf("Secret %q (spec.s3.awsSecret) does not exist in namespace %s; the restore fails unless it is created", s3.AWSSecret, r.Namespace))
		case len(secret.Data[report.CredentialsFile]) == 0 && secret.StringData[report.CredentialsFile] == "":
			return set("", metav1.ConditionUnknown, ReasonSecretInvalid, fmt.Sprintf("Secret %q (spec.s3.awsSecret) has no %q key (the AWS shared credentials file)", s3.AWSSecret, report.CredentialsFile))
		}
	}
	if b := r.Spec.Backup; b != nil {
		if _, ok := o.Backups[b.Name]; !ok {
			return set("", metav1.ConditionUnknown, ReasonBackupNotFound, fmt.Sprintf("there is no EtcdBackup %q in namespace %s", b.Name, r.Namespace))
		}
	}
	return set("", metav1.ConditionUnknown, ReasonPending, fmt.Sprintf("waiting for EtcdCluster %s to take up the restore", cluster.Name))
}

// condition keeps the previous transition time while the status holds.
func condition(r *v1beta2.EtcdRestore, status metav1.ConditionStatus, reason, msg string, now time.Time) v1beta2.ClusterCondition {
	c := v1beta2.ClusterCondition{Type: ConditionSucceeded, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(now.UTC().Truncate(time.Second))}
	for _, prev := range r.Status.Conditions {
		if prev.Type == ConditionSucceeded && prev.Status == status && !prev.LastTransitionTime.IsZero() {
			c.LastTransitionTime = prev.LastTransitionTime
		}
	}
	return c
}
