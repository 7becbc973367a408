package plan

import (
	"fmt"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// The ports every member serves.
const (
	ClientPort = 2379
	PeerPort   = 2380
)

// MemberHost is the member's stable DNS name: the Pod's hostname within
// the headless peer Service named after the cluster.
func MemberHost(member, cluster, namespace, domain string) string {
	if domain != "" {
		return member + "." + cluster + "." + namespace + ".svc." + domain
	}
	return member + "." + cluster + "." + namespace + ".svc"
}

// Addresses are how one cluster's members are reached: their DNS names,
// and the schemes its TLS policy gives the peer and client ports.
type Addresses struct {
	cluster, namespace, domain string
	peerScheme, clientScheme   string
}

// AddressesOf the cluster, as its spec asks members to serve.
func AddressesOf(c *v1beta2.EtcdCluster) Addresses {
	a := Addresses{cluster: c.Name, namespace: c.Namespace, domain: c.Spec.Pod.ClusterDomainSuffix(), peerScheme: "http", clientScheme: "http"}
	if c.Spec.TLS.IsSecurePeer() {
		a.peerScheme = "https"
	}
	if c.Spec.TLS.IsSecureClient() {
		a.clientScheme = "https"
	}
	return a
}

// PeerURL is how other members reach this one.
func (a Addresses) PeerURL(member string) string {
	return fmt.Sprintf("%s://%s:%d", a.peerScheme, MemberHost(member, a.cluster, a.namespace, a.domain), PeerPort)
}

// ClientURL is how clients, and the hook, reach this member.
func (a Addresses) ClientURL(member string) string {
	return fmt.Sprintf("%s://%s:%d", a.clientScheme, MemberHost(member, a.cluster, a.namespace, a.domain), ClientPort)
}

// ServiceURL is the client Service's URL, which backups call.
func (a Addresses) ServiceURL() string {
	host := fmt.Sprintf("%s.%s.svc", ClientServiceName(a.cluster), a.namespace)
	if a.domain != "" {
		host += "." + a.domain
	}
	return fmt.Sprintf("%s://%s:%d", a.clientScheme, host, ClientPort)
}

// ClientServiceName is the Service that clients, backups and the hook use.
func ClientServiceName(cluster string) string { return cluster + "-client" }

// ListenClientURL is where a member listens for clients: every address.
func (a Addresses) ListenClientURL() string {
	return fmt.Sprintf("%s://0.0.0.0:%d", a.clientScheme, ClientPort)
}

// ListenPeerURL is where a member listens for its peers: every address.
func (a Addresses) ListenPeerURL() string {
	return fmt.Sprintf("%s://0.0.0.0:%d", a.peerScheme, PeerPort)
}
