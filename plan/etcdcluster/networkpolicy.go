package etcdcluster

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// The fence around the members: one NetworkPolicy, named after the
// cluster, that selects every member Pod (a restore's seed included) and
// admits
//   - on the peer port, only the cluster's own member Pods: raft traffic
//     and snapshots come from no one else;
//   - on the client and metrics ports, anyone, or spec.network.clientFrom.
//
// Ingress only: members must still reach their S3 store (a restore's
// fetch) and DNS. The kubelet's probes come from the node, which a
// NetworkPolicy never blocks. A port the policy does not list is closed.

// networkPolicy is the fence, or nil with spec.network.policies false.
// It depends on the cluster's name and namespace and on clientFrom alone,
// so it is made once for them and shared (fences): a steady sync makes
// none. The answer is only encoded, never changed.
func networkPolicy(c *v1beta2.EtcdCluster, spec v1beta2.ClusterSpec) *networkingv1.NetworkPolicy {
	if !spec.Network.PoliciesEnabled() {
		return nil
	}
	key := c.Namespace + "/" + c.Name
	if spec.Network != nil && len(spec.Network.ClientFrom) > 0 {
		raw, err := json.Marshal(spec.Network.ClientFrom)
		if err != nil {
			return makeNetworkPolicy(c, spec)
		}
		key += "/" + string(raw)
	}
	if np, ok := fences.get(key); ok {
		return np
	}
	np := makeNetworkPolicy(c, spec)
	fences.put(key, np)
	return np
}

// fences holds the fences made, by cluster and clientFrom.
var fences = newPKIMemo[string, *networkingv1.NetworkPolicy](1 << 16)

func makeNetworkPolicy(c *v1beta2.EtcdCluster, spec v1beta2.ClusterSpec) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := func(n int) networkingv1.NetworkPolicyPort {
		p := intstr.FromInt32(int32(n))
		return networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: &p}
	}
	var clientFrom []networkingv1.NetworkPolicyPeer
	if spec.Network != nil {
		clientFrom = spec.Network.ClientFrom
	}
	members := selectorLabels(c.Name)
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, Labels: members},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: members},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: []networkingv1.NetworkPolicyPort{port(plan.PeerPort)}, From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: members}}}},
				{Ports: []networkingv1.NetworkPolicyPort{port(plan.ClientPort), port(MetricsPort)}, From: clientFrom},
			},
		},
	}
}
