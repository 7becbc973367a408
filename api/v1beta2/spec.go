package v1beta2

import (
	corev1 "k8s.io/api/core/v1"
)

const (
	// MinSize and MaxSize bound spec.size. Seven is the largest membership
	// etcd recommends: every extra voter slows each write's consensus and
	// buys no more failure tolerance than an odd size below it.
	MinSize = 1
	MaxSize = 7

	DefaultRepository = "quay.io/coreos/etcd"
	// DefaultVersion is the newest pinned release (3.7). The CRD writes it into the
	// object at admission, so a later hook release with a newer default never
	// upgrades a running cluster behind its owner's back.
	DefaultVersion = "3.7.3"
)

// ClusterSpec is the desired state of an etcd cluster.
//
// +kubebuilder:validation:XValidation:rule="!has(self.pod) || !has(self.pod.labels) || self.pod.labels.all(k, k != 'app' && k != 'etcd.database.coreos.com/serving' && !k.startsWith('etcd_'))",message="spec.pod.labels: the labels \"app\" and \"etcd.database.coreos.com/serving\" and labels starting with \"etcd_\" are reserved for the hook"
// +kubebuilder:validation:XValidation:rule="!has(self.auth) || !self.auth.enabled || (has(self.TLS) && (has(self.TLS.auto) || (has(self.TLS.static) && has(self.TLS.static.operatorSecret) && size(self.TLS.static.operatorSecret) != 0)))",message="spec.auth.enabled needs spec.TLS (auto, or static with operatorSecret): the hook authenticates as root with its client certificate"
// +kubebuilder:validation:XValidation:rule="!has(self.pod) || !has(self.pod.spread) || (!has(self.pod.affinity) && (!has(self.pod.topologySpreadConstraints) || size(self.pod.topologySpreadConstraints) == 0))",message="spec.pod.spread shapes the default placement, which spec.pod.affinity and spec.pod.topologySpreadConstraints replace: set whenUnsatisfiable in your own constraints instead"
type ClusterSpec struct {
	// Size is the number of etcd members, from 1 to 7.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=7
	// +kubebuilder:validation:Type=integer
	Size int `json:"size"`

	// Repository hosts the etcd images, tagged like the official releases
	// (v<version>). The image is <repository>:v<version>.
	// +kubebuilder:default="quay.io/coreos/etcd"
	// +kubebuilder:validation:MinLength=1
	// +optional
	Repository string `json:"repository,omitempty"`

	// Version is the etcd release to run, in semver form such as "3.7.3".
	// A leading "v" is accepted.
	// +kubebuilder:default="3.7.3"
	// +kubebuilder:validation:XValidation:rule="self.matches('^v?(0|[1-9][0-9]*)\\\\.(0|[1-9][0-9]*)\\\\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\\\\+[0-9A-Za-z.-]+)?$')",message="must be a semantic version such as \"3.7.3\""
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Version string `json:"version,omitempty"`

	// Hibernated stops every member Pod and keeps each member's data on
	// its claim, with the Services and the status: the cluster takes no
	// CPU or memory until this is false again, when the same members come
	// back on the same claims, with the same IDs. It needs
	// pod.persistentVolumeClaimSpec: on an emptyDir a member's data goes
	// with its Pod, and the hook refuses to hibernate unless
	// hibernation.backup names an EtcdBackup to take a final backup with.
	// +optional
	Hibernated bool `json:"hibernated,omitempty"`

	// Hibernation says how a cluster whose members keep their data on an
	// emptyDir hibernates: through a final backup, taken with writes
	// fenced and verified before any member Pod goes, and restored when
	// the cluster wakes.
	// +optional
	Hibernation *HibernationPolicy `json:"hibernation,omitempty"`

	// Paused stops every change to children and membership; status still
	// reports what is observed.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Pod is the policy for the etcd member Pods.
	// +optional
	Pod *PodPolicy `json:"pod,omitempty"`

	// Restore makes a new cluster start from a backup instead of empty: its
	// seed member restores the snapshot before it first starts. It is read
	// only while the cluster has never run; later, use an EtcdRestore. It
	// may stay in the spec (in Git, say) for the cluster's whole life.
	// +optional
	Restore *RestoreSource `json:"restore,omitempty"`

	// DisasterRecovery says which backup to offer, or to restore
	// automatically, when every member is lost.
	// +optional
	DisasterRecovery *DisasterRecoveryPolicy `json:"disasterRecovery,omitempty"`

	// TLS makes members serve mutual TLS, the CoreOS operator's way: from
	// Secrets the user issues (see docs/tls.md for the names certificates
	// need). It is fixed for the life of a cluster: a running cluster whose
	// members serve otherwise than this asks is left as it is, with a
	// condition saying why.
	// +kubebuilder:validation:XValidation:rule="!has(self.static) || (has(self.static.operatorSecret) && self.static.operatorSecret != '') == (has(self.static.member) && has(self.static.member.serverSecret) && self.static.member.serverSecret != '')",message="spec.TLS.static: operatorSecret and member.serverSecret are set together or not at all"
	// +optional
	TLS *TLSPolicy `json:"TLS,omitempty"`

	// Auth turns etcd's authentication on, with the users and roles it
	// declares (see docs/auth.md).
	// +optional
	Auth *AuthSpec `json:"auth,omitempty"`

	// Network fences the members: the NetworkPolicy the hook renders
	// (see docs/etcdcluster.md, "Network policies").
	// +optional
	Network *NetworkSpec `json:"network,omitempty"`

	// Etcd sets etcd's own flags that keep a database healthy: its quota
	// and how it compacts history. A change rolls to every member, one at
	// a time.
	// +optional
	Etcd *EtcdSettings `json:"etcd,omitempty"`

	// Housekeeping lets the hook look after etcd's database by itself:
	// recover from a NOSPACE alarm, and defragment members whose files
	// hold much free space. Off unless asked for.
	// +optional
	Housekeeping *HousekeepingPolicy `json:"housekeeping,omitempty"`
}

// PodPolicy shapes the Pods of the members.
type PodPolicy struct {
	// Labels are added to each member Pod. "app", "etcd_*" and
	// "etcd.database.coreos.com/serving" (LabelServing) are reserved.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations are added to each member Pod.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Affinity replaces the default placement (see spread).
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// AntiAffinity is the CoreOS operator's deprecated switch for a required
	// one-member-per-node rule. Affinity wins when both are set.
	// +optional
	AntiAffinity bool `json:"antiAffinity,omitempty"`

	// Resources of the etcd container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// +optional
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`

	// PriorityClassName of the member Pods: give etcd a high one, so that
	// the scheduler evicts other Pods before a member.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// ImagePullSecrets for a private etcd repository.
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// TopologySpreadConstraints spread members over zones or nodes. Their
	// label selectors should select this cluster's members: app=etcd and
	// etcd_cluster=<name>. Set, they replace the default placement.
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// Spread shapes the default placement, which applies unless affinity
	// or topologySpreadConstraints is set: members spread over
	// topology.kubernetes.io/zone and kubernetes.io/hostname with maxSkew 1,
	// "preferred" (the default: ScheduleAnyway) or "strict"
	// (DoNotSchedule).
	// +optional
	Spread SpreadPolicy `json:"spread,omitempty"`

	// EtcdEnv is added to the etcd container's environment, e.g.
	// ETCD_LOG_LEVEL. Do not use it to override the flags that bootstrap
	// membership, nor those spec.etcd sets: etcd refuses to start when a
	// flag and its variable are both set.
	// +optional
	EtcdEnv []corev1.EnvVar `json:"etcdEnv,omitempty"`

	// PersistentVolumeClaimSpec, when set, gives each member a PVC for its
	// data dir that outlives the member's Pod, so a member whose Pod is lost
	// comes back with its data instead of being replaced.
	// +optional
	PersistentVolumeClaimSpec *corev1.PersistentVolumeClaimSpec `json:"persistentVolumeClaimSpec,omitempty"`

	// ClusterDomain, such as "cluster.local", is appended to the members'
	// DNS names. Empty means the search path of the Pods resolves them.
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	ClusterDomain string `json:"clusterDomain,omitempty"`

	// LegacyClusterDomain is the CoreOS operator's spelling of clusterDomain.
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	LegacyClusterDomain string `json:"ClusterDomain,omitempty"`

	// BusyboxImage is accepted for compatibility and unused: members wait
	// for nothing before they start, so there is no init container.
	// +optional
	BusyboxImage string `json:"busyboxImage,omitempty"`

	// DNSTimeoutInSecond is accepted for compatibility and unused, like
	// busyboxImage.
	// +optional
	DNSTimeoutInSecond int64 `json:"DNSTimeoutInSecond,omitempty"`
}
