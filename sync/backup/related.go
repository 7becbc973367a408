package backup

import (
	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/sync"
)

// RelatedResource is one rule of a customize hook's answer.
type RelatedResource = sync.RelatedResource

// Related lists the objects a sync of an EtcdBackup needs besides its
// children: the S3 Secret or the PersistentVolumeClaim, checked before a
// run mounts it, and the EtcdCluster that clusterName names. By name, never by selector:
// Metacontroller then watches only these.
func Related(namespace string, spec v1beta2.BackupSpec) []RelatedResource {
	out := []RelatedResource{}
	if spec.S3 != nil && spec.S3.AWSSecret != "" {
		out = append(out, RelatedResource{APIVersion: "v1", Resource: "secrets", Namespace: namespace, Names: []string{spec.S3.AWSSecret}})
	}
	if spec.PVC != nil && spec.PVC.ClaimName != "" {
		out = append(out, RelatedResource{APIVersion: "v1", Resource: "persistentvolumeclaims", Namespace: namespace, Names: []string{spec.PVC.ClaimName}})
	}
	if spec.ClusterName != "" {
		out = append(out, RelatedResource{APIVersion: v1beta2.APIVersion, Resource: "etcdclusters", Namespace: namespace, Names: []string{spec.ClusterName}})
	}
	return out
}
