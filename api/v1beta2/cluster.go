package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	Group   = "etcd.database.coreos.com"
	Version = "v1beta2"
	Kind    = "EtcdCluster"

	// APIVersion is what a parent's apiVersion field must say.
	APIVersion = Group + "/" + Version
)

// EtcdCluster is an etcd cluster run by the etcd hook behind Metacontroller.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=etcdclusters,singular=etcdcluster,shortName=etcd,categories=all;etcd
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 56",message="metadata.name must be at most 56 characters: it names the member Pods (<name>-<5 characters>) and the Service <name>-client, which must be DNS labels of at most 63 characters"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter): it is also the name of the cluster's Services and the Pods' subdomain"
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.spec.size`,description="Desired number of members"
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyMembers`,description="Members whose Pod is Ready"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.currentVersion`,description="Lowest etcd version a member runs"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterSpec   `json:"spec"`
	Status ClusterStatus `json:"status,omitempty"`
}

// EtcdClusterList is a list of EtcdClusters.
//
// +kubebuilder:object:root=true
type EtcdClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdCluster `json:"items"`
}
