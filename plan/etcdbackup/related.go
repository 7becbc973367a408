package etcdbackup

import (
	"slices"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// RelatedResource is one rule of a customize hook's answer.
type RelatedResource = plan.RelatedResource

// Related lists the objects a sync of an EtcdBackup needs besides its
// children: the S3 Secret or the PersistentVolumeClaim, and the
// clientTLSSecret and the encryption key's Secret, checked before a run
// mounts them, and the EtcdCluster
// that clusterName names. By name, never by selector: Metacontroller then
// watches only these. The Secrets share one rule, each name once.
//
// The named EtcdCluster's operatorSecret cannot be here: this hook is
// called with the EtcdBackup alone, so it cannot know the name. A run
// mounts that Secret optionally instead (see clientTLS).
func Related(namespace string, spec v1beta2.BackupSpec) []RelatedResource {
	out := []RelatedResource{}
	var secrets []string
	for _, name := range []string{awsSecret(spec), spec.ClientTLSSecret, encryptionSecret(spec)} {
		if name != "" && !slices.Contains(secrets, name) {
			secrets = append(secrets, name)
		}
	}
	if len(secrets) > 0 {
		out = append(out, RelatedResource{APIVersion: "v1", Resource: "secrets", Namespace: namespace, Names: secrets})
	}
	if spec.PVC != nil && spec.PVC.ClaimName != "" {
		out = append(out, RelatedResource{APIVersion: "v1", Resource: "persistentvolumeclaims", Namespace: namespace, Names: []string{spec.PVC.ClaimName}})
	}
	if spec.ClusterName != "" {
		out = append(out, RelatedResource{APIVersion: v1beta2.APIVersion, Resource: "etcdclusters", Namespace: namespace, Names: []string{spec.ClusterName}})
	}
	return out
}

func encryptionSecret(spec v1beta2.BackupSpec) string {
	if spec.Encryption == nil {
		return ""
	}
	return spec.Encryption.SecretName
}

func awsSecret(spec v1beta2.BackupSpec) string {
	if spec.S3 == nil {
		return ""
	}
	return spec.S3.AWSSecret
}
