// Package v1beta2 holds the EtcdCluster API of group etcd.database.coreos.com.
//
// The types keep the field names and JSON tags of the CoreOS etcd-operator's
// v1beta2 API, so manifests written for that operator apply unchanged. The
// CRD under manifests/ is generated from these types by controller-gen, so
// the kubebuilder markers here are the single source of the schema.
//
// +groupName=etcd.database.coreos.com
// +kubebuilder:object:generate=false
package v1beta2
