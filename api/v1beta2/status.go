package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterPhase is the coarse state of a cluster.
type ClusterPhase string

const (
	PhaseCreating ClusterPhase = "Creating"
	PhaseRunning  ClusterPhase = "Running"
	PhaseFailed   ClusterPhase = "Failed"
	// PhaseHibernated: spec.hibernated, and no member Pod is left; the
	// members' data waits on their claims.
	PhaseHibernated ClusterPhase = "Hibernated"
)

// ConditionType names a condition.
type ConditionType string

const (
	// Available: a quorum of members serves clients.
	ConditionAvailable ConditionType = "Available"
	// Progressing: the hook is moving the cluster toward its spec.
	ConditionProgressing ConditionType = "Progressing"
	// Degraded: something needs attention: an invalid spec, members that
	// are not ready, a lost quorum, or a spec field not yet honoured.
	ConditionDegraded ConditionType = "Degraded"
	// Upgrading: members run another version than the spec asks for, and
	// the hook is moving them one at a time, or has stopped and says why.
	ConditionUpgrading ConditionType = "Upgrading"
	// CertificatesReady: with spec.TLS, every certificate is valid and,
	// with spec.TLS.auto, renewed on time; False says which is not.
	ConditionCertificatesReady ConditionType = "CertificatesReady"
	// Adopted: members run on the Pods the CoreOS etcd-operator made,
	// taken over as they are; False while the hook waits for such a
	// cluster to be stable before it takes it over.
	ConditionAdopted ConditionType = "Adopted"

	// The kstatus conditions, which Flux, kubectl wait and Argo CD (with
	// the Lua check in manifests/gitops) read: see docs/gitops.md ("GitOps
	// health"). EtcdBackup and EtcdRestore carry them too. Reconciling and
	// Stalled are abnormal-true, and never both True.
	//
	// Ready: the object matches its spec. For a cluster: spec.size members,
	// every one a ready voter on the target image and Pod spec, and a
	// leader elected.
	ConditionReady ConditionType = "Ready"
	// Reconciling: the hook is moving the object toward its spec.
	ConditionReconciling ConditionType = "Reconciling"
	// Stalled: the hook cannot go on without a person: an invalid spec, a
	// refused change, a confirmed loss of quorum, a halted rollout, a
	// failed restore. Its reason says which.
	ConditionStalled ConditionType = "Stalled"
)

// ClusterStatus is what the hook last observed. Metacontroller replaces it
// wholesale on every sync, so every field is recomputed from observation.
type ClusterStatus struct {
	// ObservedGeneration is injected by Metacontroller.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// +optional
	// +kubebuilder:validation:Enum=Creating;Running;Failed;Hibernated
	Phase ClusterPhase `json:"phase,omitempty"`

	// Reason explains the phase in one sentence.
	// +optional
	Reason string `json:"reason,omitempty"`

	// ControlPaused mirrors spec.paused once the hook has honoured it.
	// +optional
	ControlPaused bool `json:"controlPaused,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []ClusterCondition `json:"conditions,omitempty"`

	// Size is the number of members etcd reports, learners included.
	// +optional
	Size int `json:"size"`

	// ReadyMembers counts members.ready, for the printer column.
	// +optional
	ReadyMembers int `json:"readyMembers"`

	// +optional
	Members MembersStatus `json:"members,omitzero"`

	// ServiceName is the client Service.
	// +optional
	ServiceName string `json:"serviceName,omitempty"`

	// +optional
	ClientPort int `json:"clientPort,omitempty"`

	// CurrentVersion is the lowest version a member reports running.
	// +optional
	CurrentVersion string `json:"currentVersion,omitempty"`

	// TargetVersion is the version the spec asks for.
	// +optional
	TargetVersion string `json:"targetVersion,omitempty"`

	// Bootstrap records the etcd cluster this EtcdCluster created. Once it
	// says bootstrapped, losing every member is reported as AllMembersLost
	// and never answered with a new, empty cluster under the same name,
	// unless the recreate-empty annotation names its seed member.
	// +optional
	Bootstrap *BootstrapStatus `json:"bootstrap,omitempty"`

	// Restore is the newest restore request the hook took up and its
	// outcome.
	// +optional
	Restore *ClusterRestoreStatus `json:"restore,omitempty"`

	// NewestBackup is the newest backup known for this cluster: what a
	// restore would bring back, and what it would cost.
	// +optional
	NewestBackup *KnownBackup `json:"newestBackup,omitempty"`

	// Housekeeping is the housekeeping under way (spec.housekeeping).
	// +optional
	Housekeeping *HousekeepingStatus `json:"housekeeping,omitempty"`

	// Storage is the members' data volumes, for a cluster on claims.
	// +optional
	Storage *StorageStatus `json:"storage,omitempty"`

	// Hibernation is where a hibernation through a final backup stands
	// (spec.hibernation), and the backup that waking restores.
	// +optional
	Hibernation *HibernationStatus `json:"hibernation,omitempty"`

	// TLS reports the certificates the members and the hook use, with
	// spec.TLS.
	// +optional
	TLS *TLSStatus `json:"TLS,omitempty"`

	// Auth reports etcd's authentication, with spec.auth.
	// +optional
	Auth *AuthStatus `json:"auth,omitempty"`
}

// AuthStatus is etcd's authentication as the hook last saw it, and the
// users and roles the hook looks after.
type AuthStatus struct {
	// Enabled: etcd's authentication is on.
	Enabled bool `json:"enabled"`
	// Users and Roles are those the hook made from spec.auth and looks
	// after: one the spec no longer names is deleted. Root is not listed.
	// +optional
	Users []string `json:"users,omitempty"`
	// +optional
	Roles []string `json:"roles,omitempty"`
	// Pending is the change the hook makes next, while it has one.
	// +optional
	Pending string `json:"pending,omitempty"`
}

// TLSStatus is what the hook sees of the cluster's certificates.
type TLSStatus struct {
	// Certificates lists each certificate: the CAs and the leaves of
	// spec.TLS.auto, or the leaves of the Secrets spec.TLS.static names.
	// +optional
	// +listType=map
	// +listMapKey=name
	Certificates []CertificateStatus `json:"certificates,omitempty"`
	// CARotation says where a rotation of the CAs stands, while one runs.
	// +optional
	CARotation string `json:"caRotation,omitempty"`
	// Static names the Secrets of spec.TLS.static that the members were
	// started with. It outlives a change of spec.TLS.static to
	// spec.TLS.auto until no member mounts them, so that the customize hook
	// still relates them: the move copies their certificates, and trusts
	// their CAs until every member trusts the hook's.
	// +optional
	Static *StaticTLS `json:"static,omitempty"`
}

// CertificateStatus is one certificate.
type CertificateStatus struct {
	// Name says which: peer-ca, client-ca, peer, server or operator.
	Name string `json:"name"`
	// Secret holds it.
	Secret string `json:"secret"`
	// NotAfter is when it expires.
	NotAfter metav1.Time `json:"notAfter"`
	// RenewAt is when the hook renews it; absent for a certificate the
	// user issued (spec.TLS.static), which the user renews.
	// +optional
	RenewAt *metav1.Time `json:"renewAt,omitempty"`
}

// KnownBackup is a backup an EtcdBackup reports for this cluster.
type KnownBackup struct {
	// EtcdBackup is the name of the EtcdBackup that took it.
	EtcdBackup string `json:"etcdBackup"`
	Location   string `json:"location"`
	Revision   int64  `json:"revision"`
	// +optional
	EtcdVersion string      `json:"etcdVersion,omitempty"`
	Time        metav1.Time `json:"time"`
}

// AnnotationRecreateEmpty, set on an EtcdCluster whose members are all
// lost, asks for a new, empty etcd cluster in their place. Its value must
// be the lost cluster's status.bootstrap.seedMember, so that an annotation
// left in place (in Git, say) never accepts a later loss.
const AnnotationRecreateEmpty = Group + "/recreate-empty"

// LabelServing is on the member Pods that the client Service sends clients
// to: the hook sets it once a member is a voting member that has caught up
// with the leader, so that no client reaches a learner.
const LabelServing = Group + "/serving"

// BootstrapStatus is the record of the etcd cluster behind an EtcdCluster.
// The hook writes it on every sync, carried over from what it read, and
// keeps a copy on the cluster's peer Service, so that a status wiped by
// hand does not erase it.
type BootstrapStatus struct {
	// SeedMember is the member the etcd cluster was (or is being)
	// bootstrapped from. It names the cluster in the recreate-empty
	// annotation.
	SeedMember string `json:"seedMember"`

	// Bootstrapped is true once a member was seen running: from then on
	// the cluster may hold data.
	// +optional
	Bootstrapped bool `json:"bootstrapped,omitempty"`

	// Formed is true once the members a restore started were seen as one
	// cluster: a member Ready (its etcd had a leader) or the membership
	// read. Before that, no write beyond the backup can have been
	// committed, and a member whose Pod is gone restores again under its
	// name; from then on it is a dead member, as any.
	// +optional
	Formed bool `json:"formed,omitempty"`

	// ClusterID is etcd's cluster ID, in hex, once a member answered.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`

	// RecreatedFrom is the seed member of the lost cluster that an explicit
	// recreate-empty replaced with this one.
	// +optional
	RecreatedFrom string `json:"recreatedFrom,omitempty"`

	// Restore is set when the seed member started from a snapshot.
	// +optional
	Restore *RestoreRecord `json:"restore,omitempty"`

	// RevisionSeen is the highest store revision a member of any etcd
	// cluster this EtcdCluster ran was seen at, rounded down to a million
	// so that it changes once per million writes rather than on every sync.
	// A restore starts the restored store above it (see RestoreRecord), even
	// after every member is lost and nothing else remembers it.
	// +optional
	RevisionSeen int64 `json:"revisionSeen,omitempty"`
}

// GetRevisionSeen is b.RevisionSeen, or 0 for no record.
func (b *BootstrapStatus) GetRevisionSeen() int64 {
	if b == nil {
		return 0
	}
	return b.RevisionSeen
}

// MembersStatus lists members by readiness of their Pods.
type MembersStatus struct {
	// +optional
	Ready []string `json:"ready,omitempty"`
	// +optional
	Unready []string `json:"unready,omitempty"`
	// Placement is where each member's Pod was scheduled: its node and
	// zone, by member name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Placement []MemberPlacement `json:"placement,omitempty"`
}

// ClusterCondition is one observation about the cluster.
type ClusterCondition struct {
	Type ConditionType `json:"type"`
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status metav1.ConditionStatus `json:"status"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// LastTransitionTime changes only when Status changes, so that a steady
	// cluster's status is byte-for-byte stable and causes no sync loop.
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty,omitzero"`
}
