package sync

import (
	"crypto/sha256"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

const (
	ClientPort = 2379
	PeerPort   = 2380
)

// nameAlphabet has no vowels, so generated names never spell words, and no
// look-alike characters; it is the alphabet Kubernetes uses for generateName.
const nameAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// SuffixLength is the length of the random part of a member name.
const SuffixLength = 5

// RandomSuffix turns random bytes into a member-name suffix.
func RandomSuffix(random []byte) string {
	var b strings.Builder
	for i := 0; i < SuffixLength && i < len(random); i++ {
		b.WriteByte(nameAlphabet[int(random[i])%len(nameAlphabet)])
	}
	return b.String()
}

// SeedName is the first member's name. It is derived from the parent's UID
// rather than drawn at random, so that a sync answered twice (say, after a
// stale informer cache hid the first seed Pod) names the same seed instead
// of bootstrapping two clusters.
func SeedName(cluster, uid string) string {
	sum := sha256.Sum256([]byte("seed/" + uid))
	return cluster + "-" + RandomSuffix(sum[:])
}

// ClusterToken is the --initial-cluster-token: unique per EtcdCluster
// object, so members of two clusters can never join each other.
func ClusterToken(cluster, uid string) string {
	return cluster + "-" + uid
}

// memberHost is the member's stable DNS name: the Pod's hostname within
// the headless peer Service named after the cluster.
func memberHost(member, cluster, namespace, domain string) string {
	host := fmt.Sprintf("%s.%s.%s.svc", member, cluster, namespace)
	if domain != "" {
		host += "." + domain
	}
	return host
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
	return fmt.Sprintf("%s://%s:%d", a.peerScheme, memberHost(member, a.cluster, a.namespace, a.domain), PeerPort)
}

// ClientURL is how clients, and the hook, reach this member.
func (a Addresses) ClientURL(member string) string {
	return fmt.Sprintf("%s://%s:%d", a.clientScheme, memberHost(member, a.cluster, a.namespace, a.domain), ClientPort)
}

// ServiceURL is the client Service's URL, which backups call.
func (a Addresses) ServiceURL() string {
	host := fmt.Sprintf("%s.%s.svc", ClientServiceName(a.cluster), a.namespace)
	if a.domain != "" {
		host += "." + a.domain
	}
	return fmt.Sprintf("%s://%s:%d", a.clientScheme, host, ClientPort)
}

// MemberName recovers a member's name. A member that was added but has not
// started yet has an empty name in etcd's member list; its peer URL still
// carries the name as the first DNS label, which is how a restarted hook
// recognises it.
func MemberName(m Member, cluster string) string {
	if m.Name != "" {
		return m.Name
	}
	for _, raw := range m.PeerURLs {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		label, _, _ := strings.Cut(u.Hostname(), ".")
		return label
	}
	return ""
}

// initialCluster renders --initial-cluster for a member joining the given
// membership: every member, started or not, by name and peer URL.
func initialCluster(ms *Membership, cluster string) string {
	parts := make([]string, 0, len(ms.Members))
	for _, m := range ms.Members {
		name := MemberName(m, cluster)
		for _, u := range m.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
