package etcdrestore

import (
	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// Related lists what a sync of an EtcdRestore needs besides itself: the
// EtcdCluster it restores, the S3 Secret and the EtcdBackup it names. By
// name, so that Metacontroller watches only these.
func Related(namespace string, spec v1beta2.RestoreSpec) []plan.RelatedResource {
	out := []plan.RelatedResource{}
	if spec.EtcdCluster.Name != "" {
		out = append(out, plan.RelatedResource{APIVersion: v1beta2.APIVersion, Resource: "etcdclusters", Namespace: namespace, Names: []string{spec.EtcdCluster.Name}})
	}
	if spec.S3 != nil && spec.S3.AWSSecret != "" {
		out = append(out, plan.RelatedResource{APIVersion: "v1", Resource: "secrets", Namespace: namespace, Names: []string{spec.S3.AWSSecret}})
	}
	if spec.Backup != nil && spec.Backup.Name != "" {
		out = append(out, plan.RelatedResource{APIVersion: v1beta2.APIVersion, Resource: "etcdbackups", Namespace: namespace, Names: []string{spec.Backup.Name}})
	}
	return out
}
