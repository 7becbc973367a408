package etcdcluster

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// Observed is everything one sync knows.
type Observed struct {
	Cluster *v1beta2.EtcdCluster
	// SpecErrors are the problems with the parent's spec, including a spec
	// that could not be decoded at all. Any of them freezes the cluster.
	SpecErrors field.ErrorList
	// SpecText is the parent's spec as the request carried it, which
	// Cluster.Spec was decoded from and nothing changed since; nil when
	// there is none. It keys what the planner remembers of a spec between
	// syncs (see podHashes); without it that is worked out every time.
	SpecText []byte

	Pods     map[string]*corev1.Pod
	Services map[string]*corev1.Service
	PVCs     map[string]*corev1.PersistentVolumeClaim
	PDBs     map[string]*policyv1.PodDisruptionBudget
	// NetworkPolicies are the fences the hook rendered (networkpolicy.go).
	NetworkPolicies map[string]*networkingv1.NetworkPolicy

	// Membership is etcd's view, or nil when it could not be read.
	Membership *membership.Membership
	// MembershipError says why Membership is nil; it goes into status.
	MembershipError string
	// Auth is etcd's authentication, read when spec.auth is set or the
	// status says the hook looked after it (NeedsAuth); nil otherwise, or
	// when it could not be read (AuthError says why).
	Auth      *membership.AuthState
	AuthError string

	Finalizing bool
	Now        time.Time
	// FreshSuffix names the next member ("<cluster>-<suffix>"). The caller
	// draws it at random so that no name is ever reused, which keeps a new
	// member off a removed member's data and DNS history.
	FreshSuffix string

	// RestoreRequest is the EtcdRestore named after the cluster, if one
	// exists, and Backups the EtcdBackups of the namespace, by name: the
	// related objects the customize hook asks for (see restore.go).
	RestoreRequest *v1beta2.EtcdRestore
	// RestoreRequestError says why the EtcdRestore did not decode.
	RestoreRequestError string
	Backups             map[string]*v1beta2.EtcdBackup
	// Secrets are the Secrets spec.TLS names, by name, as the customize
	// hook relates them (see tls.go).
	Secrets map[string]*corev1.Secret
	// SecretChildren are the Secrets the hook renders, by name: the CAs
	// and certificates of spec.TLS.auto (see autotls.go).
	SecretChildren map[string]*corev1.Secret
	// StorageClasses are the cluster's StorageClasses, by name, as the
	// customize hook relates them for a cluster on claims: whether a
	// claim's class allows volume expansion (volumes.go). Nil when the
	// request carried none at all (a Metacontroller before v4.15, or no
	// customize hook), which is not the same as none found.
	StorageClasses map[string]*storagev1.StorageClass
	// FilesystemResizeGrace is how long a grown claim may wait for its
	// file system before its member's Pod is rolled to mount it again
	// [DefaultFilesystemResizeGrace].
	FilesystemResizeGrace time.Duration
	// SecretPropagation is how long the kubelets take to bring an updated
	// Secret into the Pods that mount it [DefaultSecretPropagation]: a CA
	// leaves the bundles only that long after the leaves it signed did.
	SecretPropagation time.Duration
	// AgentImage is this project's image, which fetches and checks the
	// snapshot in a restored cluster's seed.
	AgentImage string

	// Acted is set when this sync already made its membership change (or
	// tried to); the plan then proposes none and reports the outcome.
	Acted *Outcome

	// derived is what Derive worked out ahead of planning; see derived.go.
	derived *derived
}

// NeedsAuth reports whether a sync must read etcd's authentication: the
// spec declares it, or the hook looked after it before (to turn it off,
// or delete what the spec dropped).
func NeedsAuth(o *Observed) bool {
	return o.Cluster.Spec.Auth != nil || o.Cluster.Status.Auth != nil
}
