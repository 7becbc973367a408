package v1beta2

import networkingv1 "k8s.io/api/networking/v1"

// NetworkSpec is who may reach the members. By default the hook renders a
// NetworkPolicy that lets only the cluster's own members reach the peer
// port, and anyone reach the client and metrics ports.
type NetworkSpec struct {
	// Policies renders the NetworkPolicy [true]. false leaves the members
	// reachable as the namespace's other policies say.
	// +optional
	Policies *bool `json:"policies,omitempty"`
	// ClientFrom narrows who may reach the client (2379) and metrics
	// (2381) ports, as a NetworkPolicy's from: the hook calls the members
	// on the client port, and backup runs, archivers and Prometheus come
	// there too, so include them (their namespaces or Pods).
	// +optional
	ClientFrom []networkingv1.NetworkPolicyPeer `json:"clientFrom,omitempty"`
}

// PoliciesEnabled reports whether the hook renders the NetworkPolicy.
func (n *NetworkSpec) PoliciesEnabled() bool {
	return n == nil || n.Policies == nil || *n.Policies
}
