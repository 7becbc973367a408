package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KindBackup is the kind of an EtcdBackup.
const KindBackup = "EtcdBackup"

// EtcdBackup takes snapshots of an etcd cluster, once or periodically, and
// stores them. The fields of the CoreOS etcd-backup-operator keep their
// names, so its manifests apply unchanged.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=etcdbackups,singular=etcdbackup,categories=all
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Storage",type=string,JSONPath=`.spec.storageType`
// +kubebuilder:printcolumn:name="Succeeded",type=boolean,JSONPath=`.status.succeeded`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.etcdRevision`
// +kubebuilder:printcolumn:name="Last success",type=date,JSONPath=`.status.lastSuccessDate`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BackupSpec   `json:"spec"`
	Status BackupStatus `json:"status,omitempty"`
}

// EtcdBackupList is a list of EtcdBackups.
//
// +kubebuilder:object:root=true
type EtcdBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdBackup `json:"items"`
}

// BackupStorageType names where backups go.
//
// +kubebuilder:validation:Enum=S3;PVC;ABS;GCS;OSS
type BackupStorageType string

// The storage types served: S3, and PVC (a volume, which the CoreOS
// operator lacked). Its others (ABS, GCS, OSS) are accepted by the schema
// and refused with a condition.
const (
	BackupStorageS3  BackupStorageType = "S3"
	BackupStoragePVC BackupStorageType = "PVC"
)

// BackupSpec says what to back up, where to, and how often.
//
// +kubebuilder:validation:XValidation:rule="(has(self.etcdEndpoints) && size(self.etcdEndpoints) > 0) != (has(self.clusterName) && size(self.clusterName) > 0)",message="name the cluster by etcdEndpoints or by clusterName, exactly one of them"
// +kubebuilder:validation:XValidation:rule="!has(self.encryption) || (has(self.backupPolicy) && has(self.backupPolicy.deltaIntervalInSecond) && self.backupPolicy.deltaIntervalInSecond > 0)",message="spec.encryption is for continuous backups: set spec.backupPolicy.deltaIntervalInSecond"
// +kubebuilder:validation:XValidation:rule="!has(self.backupPolicy) || !has(self.backupPolicy.compressSnapshots) || !self.backupPolicy.compressSnapshots || (has(self.backupPolicy.deltaIntervalInSecond) && self.backupPolicy.deltaIntervalInSecond > 0)",message="spec.backupPolicy.compressSnapshots is for continuous backups: set spec.backupPolicy.deltaIntervalInSecond"
type BackupSpec struct {
	// EtcdEndpoints are client URLs of the cluster's members (CoreOS). One
	// is enough: the agent finds the others through etcd's member list.
	// +optional
	EtcdEndpoints []string `json:"etcdEndpoints,omitempty"`

	// ClusterName names an EtcdCluster in the same namespace, instead of
	// etcdEndpoints.
	// +optional
	ClusterName string `json:"clusterName,omitempty"`

	// StorageType is S3 or PVC.
	StorageType BackupStorageType `json:"storageType"`

	// +optional
	BackupPolicy *BackupPolicy `json:"backupPolicy,omitempty"`

	// S3 is the destination for storageType S3.
	// +optional
	S3 *S3BackupSource `json:"s3,omitempty"`

	// PVC is the destination for storageType PVC.
	// +optional
	PVC *PVCBackupSource `json:"pvc,omitempty"`

	// ClientTLSSecret (CoreOS) names a Secret in the same namespace with
	// the client certificate that runs call members serving TLS (https
	// endpoints) with: etcd-client.crt, etcd-client.key and
	// etcd-client-ca.crt (the CA of the members' server certificates).
	// It is checked before each run and mounted into the run's Pod.
	// Without it, a backup by clusterName of a cluster with spec.TLS uses
	// that cluster's operatorSecret, and https etcdEndpoints are refused
	// with the condition ClientTLSMissing.
	// +optional
	ClientTLSSecret string `json:"clientTLSSecret,omitempty"`

	// Encryption seals every object a continuous backup writes, snapshots
	// and deltas, with AES-256-GCM in authenticated chunks, under the
	// 32-byte key in a Secret. A backup without it stays readable by
	// etcdutl. The key itself never appears in a status or a Pod spec:
	// the archiver mounts the Secret.
	// +optional
	Encryption *EncryptionKey `json:"encryption,omitempty"`
}

// EncryptionKey names the Secret key that holds a backup's 32-byte
// encryption key: raw, or 44 characters of base64, or 64 of hex.
type EncryptionKey struct {
	// SecretName names a Secret in the same namespace.
	// +kubebuilder:validation:MinLength=1
	SecretName string `json:"secretName"`
	// Key is the Secret's key that holds the encryption key.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// BackupPolicy is the CoreOS backup policy.
type BackupPolicy struct {
	// TimeoutInSecond bounds one backup run; 0 means 30 minutes.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TimeoutInSecond int64 `json:"timeoutInSecond,omitempty"`

	// BackupIntervalInSecond is the time between periodic backups; 0 takes
	// one backup.
	// +kubebuilder:validation:Minimum=0
	// +optional
	BackupIntervalInSecond int64 `json:"backupIntervalInSecond,omitempty"`

	// MaxBackups is how many periodic backups to keep; 0 keeps all.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxBackups int `json:"maxBackups,omitempty"`

	// DeltaIntervalInSecond (1 to 60) makes the backup continuous: a
	// long-running archiver Pod stores every change within this many
	// seconds of etcd acknowledging it, as deltas named by their exact
	// revision range, beside full snapshots every backupIntervalInSecond
	// (0: only one, to begin the chain). maxBackups then keeps that many
	// full snapshots, each with the deltas that follow it, never a delta
	// whose snapshot is gone. An EtcdRestore of such a backup can bring
	// back any revision or moment it holds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	// +optional
	DeltaIntervalInSecond int64 `json:"deltaIntervalInSecond,omitempty"`

	// CompressSnapshots stores a continuous backup's full snapshots with
	// zstd, as its deltas always are. etcdutl then no longer reads them
	// as they are.
	// +optional
	CompressSnapshots bool `json:"compressSnapshots,omitempty"`
}

// Continuous says whether the policy asks for a continuous backup.
func (p *BackupPolicy) Continuous() bool { return p != nil && p.DeltaIntervalInSecond > 0 }

// S3BackupSource is the CoreOS S3 destination.
type S3BackupSource struct {
	// Path is "<bucket>/<key>".
	Path string `json:"path"`

	// AWSSecret names a Secret with the AWS shared files "credentials" and
	// "config" (profile default).
	AWSSecret string `json:"awsSecret"`

	// Endpoint is an S3-compatible store's URL; empty for AWS S3.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// ForcePathStyle addresses the bucket in the path rather than the host.
	// +optional
	ForcePathStyle bool `json:"forcePathStyle,omitempty"`
}

// PVCBackupSource is a volume destination: backups are files on a claim.
type PVCBackupSource struct {
	// ClaimName names a PersistentVolumeClaim in the same namespace.
	ClaimName string `json:"claimName"`

	// Path is the file, relative to the claim's root, that a one-shot
	// backup is written to; periodic backups add "_v<revision>_<time>".
	// +kubebuilder:default="etcd.backup"
	// +optional
	Path string `json:"path,omitempty"`
}

// BackupStatus is what the hook last observed of the backups. The first
// five fields are the CoreOS operator's.
type BackupStatus struct {
	// ObservedGeneration is injected by Metacontroller.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Succeeded says whether the last run succeeded.
	// +optional
	Succeeded bool `json:"succeeded"`

	// Reason explains a failure. Its JSON name is capitalised, as CoreOS
	// had it.
	// +optional
	Reason string `json:"Reason,omitempty"`

	// EtcdVersion and EtcdRevision are those of the last backup stored.
	// +optional
	EtcdVersion string `json:"etcdVersion,omitempty"`
	// +optional
	EtcdRevision int64 `json:"etcdRevision,omitempty"`

	// LastSuccessDate is when the last backup was stored.
	// +optional
	LastSuccessDate *metav1.Time `json:"lastSuccessDate,omitempty"`

	// LastBackup describes the last backup stored.
	// +optional
	LastBackup *StoredBackup `json:"lastBackup,omitempty"`

	// LastRun is the last run, finished or not. The schedule is derived
	// from it and from LastSuccessDate.
	// +optional
	LastRun *BackupRun `json:"lastRun,omitempty"`

	// LastDeltaRevision is the newest revision a continuous backup has
	// stored, and LastDeltaTime when it was stored. They are refreshed at
	// most every 30 s while nothing else changes, so that the status does
	// not cause a sync of its own on every delta.
	// +optional
	LastDeltaRevision int64 `json:"lastDeltaRevision,omitempty"`
	// +optional
	LastDeltaTime *metav1.Time `json:"lastDeltaTime,omitempty"`

	// RPOSeconds is a continuous backup's recovery point: the age, in
	// whole seconds, of the oldest change etcd acknowledged that is not
	// stored yet; 0 when every change is. Refreshed as lastDeltaTime is.
	// +optional
	RPOSeconds *int64 `json:"rpoSeconds,omitempty"`

	// Chain describes a continuous backup's store: the history archived,
	// where its chain begins, and where it was broken.
	// +optional
	Chain *BackupChain `json:"chain,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []ClusterCondition `json:"conditions,omitempty"`
}

// StoredBackup is one backup as the agent stored it.
type StoredBackup struct {
	Location    string      `json:"location"`
	Size        int64       `json:"size"`
	SHA256      string      `json:"sha256"`
	Revision    int64       `json:"revision"`
	EtcdVersion string      `json:"etcdVersion"`
	ClusterID   string      `json:"clusterID,omitempty"`
	Time        metav1.Time `json:"time"`
}

// BackupRun is one run of the backup agent.
type BackupRun struct {
	// Name is the run's Pod.
	Name string `json:"name"`
	// Generation is the spec's generation the run was started for.
	Generation int64       `json:"generation"`
	Start      metav1.Time `json:"start"`
	// End is set once the run has finished.
	// +optional
	End *metav1.Time `json:"end,omitempty"`
	// +optional
	Succeeded bool `json:"succeeded,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// ConsecutiveFailures counts the failed runs up to and including this
	// one; the retry backoff grows with it.
	// +optional
	ConsecutiveFailures int `json:"consecutiveFailures,omitempty"`
	// Request is the hibernation whose final backup the run takes: the
	// EtcdCluster's status.hibernation.request.
	// +optional
	Request string `json:"request,omitempty"`
}

// BackupChain is what a continuous backup's archiver reports of the chain
// it grows: the snapshot it begins at, then deltas.
type BackupChain struct {
	// Location is where the chain's objects are: s3://bucket/key.pitr/ or
	// pvc://claim/path.pitr/.
	Location string `json:"location"`
	// ClusterID is the etcd cluster ID (hex) whose history is archived;
	// each history has a directory of its own under Location.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// StartRevision is the revision of the snapshot the current chain
	// grows from: the oldest a restore along it can reach.
	// +optional
	StartRevision int64 `json:"startRevision,omitempty"`
	// LastSnapshotRevision and LastSnapshotTime are the newest full
	// snapshot's.
	// +optional
	LastSnapshotRevision int64 `json:"lastSnapshotRevision,omitempty"`
	// +optional
	LastSnapshotTime *metav1.Time `json:"lastSnapshotTime,omitempty"`
	// Breaks are the newest times the archiver fell behind etcd's
	// compaction and began a new chain: no delta holds the revisions from
	// From to To, so no restore can reach one of them.
	// +optional
	Breaks []ChainBreak `json:"breaks,omitempty"`
	// ReportedAt is when the hook last wrote the archiver's figures
	// (lastDeltaRevision, lastDeltaTime, rpoSeconds) into the status; it
	// writes them again statusRefresh (30 s) later, or when BackupReady
	// or the chain changes.
	// +optional
	ReportedAt *metav1.Time `json:"reportedAt,omitempty"`
}

// ChainBreak is one gap between chains.
type ChainBreak struct {
	Time metav1.Time `json:"time"`
	From int64       `json:"from"`
	To   int64       `json:"to"`
}
