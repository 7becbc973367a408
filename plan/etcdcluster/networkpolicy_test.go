package etcdcluster

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

func TestNetworkPolicy(t *testing.T) {
	off := false
	tests := []struct {
		name, reason string
		network      *v1beta2.NetworkSpec
		wantNone     bool
		wantClient   []networkingv1.NetworkPolicyPeer
	}{
		{"default", "peers fenced, clients from anywhere", nil, false, nil},
		{"narrowed clients", "clientFrom becomes the client ports' from", &v1beta2.NetworkSpec{ClientFrom: []networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "etcd-hook"}}},
		}}, false, []networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "etcd-hook"}}},
		}},
		{"off", "spec.network.policies: false renders none", &v1beta2.NetworkSpec{Policies: &off}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(3, "3.6.16")
			c.Spec.Network = tt.network
			d := Plan(observed(c))
			var np *networkingv1.NetworkPolicy
			for _, ch := range d.Children {
				if ch.Kind == plan.KindNetworkPolicy {
					np = ch.Object.(*networkingv1.NetworkPolicy)
				}
			}
			if tt.wantNone {
				if np != nil {
					t.Errorf("%s: a NetworkPolicy was rendered", tt.reason)
				}
				return
			}
			if np == nil {
				t.Fatalf("%s: no NetworkPolicy in %v", tt.reason, childNames(d.Children))
			}
			members := map[string]string{LabelApp: "etcd", LabelCluster: testCluster}
			if diff := cmp.Diff(members, np.Spec.PodSelector.MatchLabels); diff != "" {
				t.Errorf("%s: the policy must select every member Pod (-want +got):\n%s", tt.reason, diff)
			}
			if len(np.Spec.Ingress) != 2 {
				t.Fatalf("%s: ingress %+v", tt.reason, np.Spec.Ingress)
			}
			peer, client := np.Spec.Ingress[0], np.Spec.Ingress[1]
			if len(peer.Ports) != 1 || peer.Ports[0].Port.IntValue() != plan.PeerPort || len(peer.From) != 1 || !cmp.Equal(peer.From[0].PodSelector.MatchLabels, members) || peer.From[0].NamespaceSelector != nil {
				t.Errorf("%s: the peer port must admit only the cluster's members: %+v", tt.reason, peer)
			}
			if len(client.Ports) != 2 || client.Ports[0].Port.IntValue() != plan.ClientPort || client.Ports[1].Port.IntValue() != MetricsPort {
				t.Errorf("%s: client rule ports %+v, want 2379 and 2381", tt.reason, client.Ports)
			}
			if diff := cmp.Diff(tt.wantClient, client.From); diff != "" {
				t.Errorf("%s: client rule from (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}
