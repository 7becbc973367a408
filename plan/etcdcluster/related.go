package etcdcluster

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// Related lists what a sync of an EtcdCluster needs besides its children:
// the EtcdRestore named after it (a restore request), and every EtcdBackup
// of its namespace, whose status says which backups of the cluster exist
// (an empty selector: which of them back up this cluster is in their
// spec, not in a label).
//
// Metacontroller refuses a rule with a label selector and a namespace (or
// names), failing every sync of the parent; a selector rule of a
// namespaced parent selects in the parent's namespace by itself. A rule by
// names needs the namespace: without one, Metacontroller looks in every
// namespace.
//
// For a cluster on claims, the StorageClasses.
//
// With spec.TLS, the Secrets it names come too, by name: their bytes
// arrive in each sync request, which is how the hook calls TLS members
// without Kubernetes credentials, and a rotated Secret triggers a sync.
func Related(c *v1beta2.EtcdCluster) []plan.RelatedResource {
	out := []plan.RelatedResource{
		{APIVersion: v1beta2.APIVersion, Resource: "etcdrestores", Namespace: c.Namespace, Names: []string{c.Name}},
		{APIVersion: v1beta2.APIVersion, Resource: "etcdbackups", LabelSelector: &metav1.LabelSelector{}},
	}
	if names := relatedSecretNames(c); len(names) > 0 {
		out = append(out, plan.RelatedResource{APIVersion: "v1", Resource: "secrets", Namespace: c.Namespace, Names: names})
	}
	if c.Spec.Persistent() {
		// Every StorageClass (they are few, and cluster-scoped: from
		// Metacontroller v4.15 an empty selector of a namespaced parent
		// selects them cluster-wide): whether the claims' class allows
		// them to grow (volumes.go).
		out = append(out, plan.RelatedResource{APIVersion: "storage.k8s.io/v1", Resource: "storageclasses", LabelSelector: &metav1.LabelSelector{}})
	}
	return out
}
