package v1beta2

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HibernationPolicy is spec.hibernation.
type HibernationPolicy struct {
	// Backup names the EtcdBackup, in the cluster's namespace, that takes
	// the final backup of a cluster on emptyDir before it hibernates. Its
	// clusterName must name this cluster, and it must take snapshots (no
	// deltaIntervalInSecond). The final backup is stored beside its
	// others, under a name of its own (as a periodic backup's), so that it
	// replaces none of them and retention deletes none for it.
	// +kubebuilder:validation:MinLength=1
	Backup string `json:"backup"`
}

// HibernationStatus is where a hibernation through a final backup stands,
// and, once the backup is verified, the backup that waking restores.
type HibernationStatus struct {
	// Backup is the EtcdBackup that takes the final backup.
	Backup string `json:"backup"`

	// Request names the final backup asked of the EtcdBackup. It is set
	// once every write is fenced off (etcd's CORRUPT alarm, raised by the
	// hook under its own member ID), so that the backup holds every write
	// etcd acknowledged.
	// +optional
	Request string `json:"request,omitempty"`

	// FencedRevision is the cluster's revision with the fence up: the
	// final backup must be at least this new.
	// +optional
	FencedRevision int64 `json:"fencedRevision,omitempty"`

	// Source is the verified final backup, which waking restores. The
	// member Pods go only once the status holds it.
	// +optional
	Source *ResolvedSource `json:"source,omitempty"`

	// Revision and Time are the final backup's.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// HibernationRequest names the final backup a hibernation asks for: the
// cluster, the generation of its spec that asked, and the revision behind
// the fence, so that hibernating again, or fencing again after the fence
// was lifted by hand and writes were taken, asks for a new one.
func HibernationRequest(cluster string, generation, fencedRevision int64) string {
	return cluster + "/" + strconv.FormatInt(generation, 10) + "@" + strconv.FormatInt(fencedRevision, 10)
}
