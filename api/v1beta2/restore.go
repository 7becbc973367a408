package v1beta2

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KindRestore is the kind of a restore request.
const KindRestore = "EtcdRestore"

// EtcdRestore asks that the EtcdCluster of the same name be brought back
// from a backup: its members are replaced by a cluster whose seed starts on
// the snapshot's data. Unlike the CoreOS operator, the EtcdCluster object
// is never deleted and recreated (its UID, Services and clients stay), and
// the running members are dropped only once the snapshot has been fetched
// and verified.
//
// An EtcdRestore is carried out once, identified by its UID; see the
// disaster-recovery runbook (docs/backup-restore.md) for what re-applying
// one does.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=etcdrestores,singular=etcdrestore,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.etcdCluster.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Succeeded",type=boolean,JSONPath=`.status.succeeded`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdRestore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RestoreSpec   `json:"spec"`
	Status RestoreStatus `json:"status,omitempty"`
}

// EtcdRestoreList is a list of EtcdRestores.
//
// +kubebuilder:object:root=true
type EtcdRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdRestore `json:"items"`
}

// RestoreSpec is the CoreOS operator's EtcdRestore spec, with two sources
// added: a volume, and the newest backup of an EtcdBackup.
//
// The name rule (metadata.name equal to spec.etcdCluster.name) is checked by
// the hook, not at admission, so that a mistaken EtcdRestore is stored and
// its status says what is wrong.
type RestoreSpec struct {
	// EtcdCluster names the cluster to restore, in the EtcdRestore's own
	// namespace. It must equal metadata.name.
	EtcdCluster EtcdClusterRef `json:"etcdCluster"`

	// BackupStorageType is where the backup is: S3 (as in the CoreOS
	// operator) or PVC. Empty with spec.backup, which implies it.
	// +kubebuilder:validation:Enum=S3;PVC;ABS;GCS;OSS
	// +optional
	BackupStorageType BackupStorageType `json:"backupStorageType,omitempty"`

	// S3 is the backup object, with storage type S3.
	// +optional
	S3 *S3BackupSource `json:"s3,omitempty"`

	// PVC is a backup file on a claim, with storage type PVC.
	// +optional
	PVC *PVCBackupSource `json:"pvc,omitempty"`

	// Backup restores the newest backup the named EtcdBackup reports in its
	// status, from the store it wrote to, checked against its sha256. Of a
	// continuous EtcdBackup, it restores its chain: the newest state it
	// stored, or the one at revision or time.
	// +optional
	Backup *BackupRef `json:"backup,omitempty"`

	// Revision restores exactly the state at this etcd revision, from a
	// continuous backup: its snapshot at or below it, then every delta up
	// to it. Refused, touching nothing, when the backup holds no path to
	// it (before its oldest snapshot, after its newest delta, or in a gap).
	// +kubebuilder:validation:Minimum=1
	// +optional
	Revision int64 `json:"revision,omitempty"`

	// Time restores, from a continuous backup, the state as of this moment
	// (RFC 3339): the newest revision the archiver had received from etcd
	// at or before it. Neither revision nor time restores the newest state
	// the backup holds.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// Encryption is the key an encrypted continuous backup was written
	// with. By backup name, the EtcdBackup's own spec.encryption is used
	// when this is empty. A wrong key, or an object altered in the store,
	// fails the restore with a reason, before any member is touched.
	// +optional
	Encryption *EncryptionKey `json:"encryption,omitempty"`
}

// EtcdClusterRef names an EtcdCluster of the same namespace.
type EtcdClusterRef struct {
	Name string `json:"name"`
}

// BackupRef names an EtcdBackup of the same namespace.
type BackupRef struct {
	Name string `json:"name"`
}

// RestoreSource is where a cluster born from a backup takes its data:
// exactly one of s3, pvc and backup.
//
// +kubebuilder:validation:XValidation:rule="[has(self.s3), has(self.pvc), has(self.backup)].filter(x, x).size() == 1",message="give exactly one of s3, pvc and backup"
type RestoreSource struct {
	// +optional
	S3 *S3BackupSource `json:"s3,omitempty"`
	// +optional
	PVC *PVCBackupSource `json:"pvc,omitempty"`
	// +optional
	Backup *BackupRef `json:"backup,omitempty"`
}

// DisasterRecoveryPolicy says what the hook may do when every member of a
// cluster that ran is lost.
type DisasterRecoveryPolicy struct {
	// Backup names the EtcdBackup whose newest backup is offered (and, with
	// autoRestore, used) to bring the cluster back. Empty means the newest
	// backup of any EtcdBackup whose spec.clusterName names this cluster.
	// +optional
	Backup string `json:"backup,omitempty"`

	// AutoRestore restores from that backup, without waiting for a person,
	// once every member is lost. Writes after the backup are lost: status
	// says how old the backup was and at which revision it was taken.
	// Without it nothing is ever restored or re-created silently.
	// +optional
	AutoRestore bool `json:"autoRestore,omitempty"`
}

// RestorePhase is how far a restore got.
type RestorePhase string

const (
	// RestoreVerifying: the seed of the restored cluster is fetching and
	// checking the snapshot; the running members are untouched.
	RestoreVerifying RestorePhase = "Verifying"
	// RestoreRestoring: the snapshot is good and the restored cluster is
	// replacing the old members and growing to its size.
	RestoreRestoring RestorePhase = "Restoring"
	// RestoreCompleted: the restored cluster serves at its size.
	RestoreCompleted RestorePhase = "Completed"
	// RestoreFailed: the backup cannot be used; nothing was changed.
	RestoreFailed RestorePhase = "Failed"
	// RestoreRefused: the request is invalid or was already carried out.
	RestoreRefused RestorePhase = "Refused"
)

// RestoreStatus is the CoreOS operator's EtcdRestore status (succeeded,
// reason) and what the restore did, and when.
type RestoreStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Succeeded is true once the cluster runs on the restored data.
	Succeeded bool `json:"succeeded"`

	// Reason says why the restore has not succeeded, or failed.
	// +optional
	Reason string `json:"reason,omitempty"`

	// +optional
	Phase RestorePhase `json:"phase,omitempty"`

	// ClusterUID is the UID of the EtcdCluster restored, which stays the
	// same through the restore.
	// +optional
	ClusterUID string `json:"clusterUID,omitempty"`

	// Location is the backup restored, e.g. s3://bucket/key.
	// +optional
	Location string `json:"location,omitempty"`

	// Revision is the etcd revision of the snapshot: every write
	// acknowledged at or before it is in the restored cluster.
	// +optional
	Revision int64 `json:"revision,omitempty"`

	// +optional
	EtcdVersion string `json:"etcdVersion,omitempty"`

	// RestoredAt is when the snapshot was verified and the old members
	// were dropped.
	// +optional
	RestoredAt *metav1.Time `json:"restoredAt,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []ClusterCondition `json:"conditions,omitempty"`
}

// ClusterRestoreStatus reports, on the EtcdCluster, the newest restore
// request the hook took up and what became of it.
type ClusterRestoreStatus struct {
	// Request identifies the request: "EtcdRestore/<uid>",
	// "spec.restore/<hash of the source>" or "autoRestore/<lost seed>".
	Request string `json:"request"`
	// Origin names it for people, e.g. "EtcdRestore demo".
	Origin string `json:"origin"`
	// Location is the backup, e.g. s3://bucket/key.
	// +optional
	Location string `json:"location,omitempty"`
	// Phase is Verifying, Restoring, Completed, Failed or Refused.
	Phase RestorePhase `json:"phase"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// +optional
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// BackupTime is when the backup was taken, when known.
	// +optional
	BackupTime *metav1.Time `json:"backupTime,omitempty"`
	// RestoredAt is when the snapshot was verified and the old members
	// were dropped.
	// +optional
	RestoredAt *metav1.Time `json:"restoredAt,omitempty"`
}

// RestoreRecord, part of the bootstrap record, says that the etcd cluster
// was seeded from a snapshot, and from which. It is what makes each
// restore request happen once: a request whose ID is recorded is done.
type RestoreRecord struct {
	Request string `json:"request"`
	// +optional
	Origin string `json:"origin,omitempty"`
	// Source is the resolved source, kept so that the seed can be rendered
	// again (with its idempotent restore steps) until it holds data.
	Source ResolvedSource `json:"source"`
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// +optional
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// +optional
	BackupTime *metav1.Time `json:"backupTime,omitempty"`
	// +optional
	RestoredAt *metav1.Time `json:"restoredAt,omitempty"`
	// Members are the members the restored cluster was restored with, the
	// seed first: each restores the same verified state from the store,
	// with the same initial cluster, and they start together. Empty in
	// records of restores that seeded one member and grew from it.
	// +optional
	Members []string `json:"members,omitempty"`
	// ReplacedRevision is the highest revision the replaced history was
	// known to have reached when the seed was rendered: the seed's restore
	// counts its revision bump from it, so that no revision handed out
	// before is handed out again. 0 when none was known.
	// +optional
	ReplacedRevision int64 `json:"replacedRevision,omitempty"`
}

// ResolvedSource is one backup object: an S3 object or a file on a claim,
// with its sha256 when known; or, with Chain, a continuous backup's key
// and the state along its chain to rebuild.
type ResolvedSource struct {
	// +optional
	S3 *S3BackupSource `json:"s3,omitempty"`
	// +optional
	PVC *PVCBackupSource `json:"pvc,omitempty"`
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// +optional
	Chain *ChainTarget `json:"chain,omitempty"`
}

// ChainTarget is the state a restore rebuilds from a continuous backup:
// at Revision, or as of Time, or the newest stored when both are unset.
type ChainTarget struct {
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// +optional
	Encryption *EncryptionKey `json:"encryption,omitempty"`
	// Resolved is the revision the restore's seed rebuilt the target to,
	// recorded when the restore is committed: every other member, and the
	// seed rendered again, rebuild exactly it, whatever the chain has
	// grown to or a moment resolves to since. The target itself stays as
	// asked, which is what an EtcdRestore applied again is compared with.
	// +optional
	Resolved int64 `json:"resolved,omitempty"`
	// History is the history (etcd cluster ID) the seed read, recorded
	// with Resolved, so that every member reads the same one.
	// +optional
	History string `json:"history,omitempty"`
}

// Location names the object as status does: s3://bucket/key or
// pvc://claim/path.
//
// A chain's adds the state rebuilt: "#revision=42" or
// "#time=2026-11-27T05:00:00Z"; none for the newest.
func (s ResolvedSource) Location() string {
	loc := ""
	switch {
	case s.S3 != nil:
		loc = "s3://" + s.S3.Path
	case s.PVC != nil:
		loc = "pvc://" + s.PVC.ClaimName + "/" + s.PVC.FilePath()
	default:
		return ""
	}
	switch c := s.Chain; {
	case c == nil:
	case c.Revision > 0:
		loc += fmt.Sprintf("#revision=%d", c.Revision)
	case c.Time != nil:
		loc += "#time=" + c.Time.UTC().Format(time.RFC3339)
	}
	return loc
}

// FilePath is the backup file within the claim; etcd.backup by default, as
// an EtcdBackup writes it.
func (p *PVCBackupSource) FilePath() string {
	if p.Path == "" {
		return "etcd.backup"
	}
	return p.Path
}

// AnnotationRestoreAgain, on an EtcdRestore, asks that it be carried out
// even though the cluster was already restored from the same backup. Its
// value must be the request of that earlier restore (the cluster's
// status.restore.request), so that a manifest left in Git never restores
// twice by itself.
const AnnotationRestoreAgain = Group + "/restore-again"
