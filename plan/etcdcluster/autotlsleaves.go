package etcdcluster

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/pki"
	"github.com/etcdhook/etcd-hook/plan"
)

// The leaves of spec.TLS.auto, in the CoreOS Secrets' shape, so that
// members mount them as they mount spec.TLS.static's.

// leafSpec is one leaf Secret: its keys, what it is issued for, and which
// CA signs it.
type leafSpec struct {
	// name is the certificate's in status.TLS.
	name                   string
	secret                 string
	certKey, keyKey, caKey string
	req                    pki.LeafRequest
	// peer: signed by the peer CA; otherwise by the client CA.
	peer bool
}

// OperatorCommonName is the common name of the hook's client certificate:
// etcd takes a client certificate's CN as its user once authentication is
// on, and the hook acts as root.
const OperatorCommonName = "root"

func (p *planner) leafSpecs(names v1beta2.TLSSecretNames, _ *authority) []leafSpec {
	c := p.o.Cluster
	domain := p.spec.Pod.ClusterDomainSuffix()
	if domain == "" {
		domain = "cluster.local"
	}
	// Any member of the peer Service: reverse DNS of a peer's address
	// gives the name with the domain, the members' URLs the one without.
	members := []string{
		fmt.Sprintf("*.%s.%s.svc", c.Name, c.Namespace),
		fmt.Sprintf("*.%s.%s.svc.%s", c.Name, c.Namespace, domain),
	}
	client := plan.ClientServiceName(c.Name)
	server := append(slices.Clone(members),
		client, client+"."+c.Namespace, client+"."+c.Namespace+".svc", client+"."+c.Namespace+".svc."+domain, "localhost")
	// etcd checks a peer's certificate against the address it calls from:
	// the IP addresses first, then the DNS names by reverse lookup. The
	// loopback addresses are for peers that call from them, as members
	// on one host do (this project's e2e harness runs them so); a call
	// from anywhere else is checked against the DNS names, and every call
	// needs a certificate of the peer CA anyway.
	loopback := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	return []leafSpec{
		{name: "peer", secret: names.Peer, certKey: v1beta2.PeerCertKey, keyKey: v1beta2.PeerKeyKey, caKey: v1beta2.PeerCAKey, peer: true,
			req: pki.LeafRequest{CommonName: c.Name + " peer", DNSNames: members, IPs: loopback, Usage: pki.Server | pki.Client}},
		// Client as well: etcd's gRPC gateway dials its own port with it.
		{name: "server", secret: names.Server, certKey: v1beta2.ServerCertKey, keyKey: v1beta2.ServerKeyKey, caKey: v1beta2.ServerCAKey,
			req: pki.LeafRequest{CommonName: c.Name + " server", DNSNames: server, IPs: loopback, Usage: pki.Server | pki.Client}},
		{name: "operator", secret: names.Operator, certKey: v1beta2.ClientCertKey, keyKey: v1beta2.ClientKeyKey, caKey: v1beta2.ClientCAKey,
			req: pki.LeafRequest{CommonName: OperatorCommonName, Usage: pki.Client}},
	}
}

// renderLeaf answers one leaf Secret: the observed one, with the current
// trust bundle, while its leaf is good; a new leaf otherwise. A leaf that
// is due while a CA rotation is under way waits for the new CA rather
// than be issued again under the one going out (it could only be cut to
// that CA's expiry, which is due too).
func (p *planner) renderLeaf(l leafSpec, a *authority, lead time.Duration) (*corev1.Secret, time.Time, error) {
	pick := func(c *caPair) *pki.KeyPair {
		if c == nil {
			return nil
		}
		if l.peer {
			return c.peer
		}
		return c.client
	}
	ca := pick(a.cur)
	bundle := pki.Bundle(ca, pick(a.next), pick(a.old))
	now := p.o.Now
	if s, ok := p.o.SecretChildren[l.secret]; ok {
		v := leafVerdictOf(s, l, ca)
		due := !now.Before(v.notAfter.Add(-lead))
		if (v.good && (!due || a.next != nil)) || (!ca.CanSign() && v.parses && now.Before(v.notAfter)) {
			data := maps.Clone(s.Data)
			data[l.caKey] = bundle
			return p.secretChild(l.secret, data), v.notAfter, nil
		}
	}
	req := l.req
	req.NotAfter = now.Add(p.spec.TLS.Auto.LeafValidity())
	leaf, err := ca.Issue(req, now)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("issuing Secret %q: %w", l.secret, err)
	}
	return p.secretChild(l.secret, map[string][]byte{l.certKey: leaf.CertPEM, l.keyKey: leaf.KeyPEM, l.caKey: bundle}), leaf.Cert.NotAfter, nil
}

// leafVerdict is what an observed leaf Secret holds.
type leafVerdict struct {
	// parses: a certificate and its key.
	parses bool
	// good: it parses, the CA signed it, and it names what it must.
	good     bool
	notAfter time.Time
}

// leafVerdicts remembers verdicts by Secret version and CA, so that a
// steady sync checks no signature: one entry per leaf Secret and CA.
var leafVerdicts = newPKIMemo[leafVerdict](1 << 16)

func leafVerdictOf(s *corev1.Secret, l leafSpec, ca *pki.KeyPair) leafVerdict {
	key := ""
	if s.UID != "" && s.ResourceVersion != "" {
		key = strings.Join([]string{string(s.UID), s.ResourceVersion, l.certKey, ca.Fingerprint(), strings.Join(l.req.DNSNames, ","), l.req.CommonName}, "\x00")
		if v, ok := leafVerdicts.get(key); ok {
			return v
		}
	}
	var v leafVerdict
	if leaf, err := pki.Parse(plan.SecretValue(s, l.certKey), plan.SecretValue(s, l.keyKey)); err == nil {
		v.parses, v.notAfter = true, leaf.Cert.NotAfter
		v.good = pki.IssuedBy(leaf.Cert, ca) && leaf.Cert.Subject.CommonName == l.req.CommonName &&
			sameSet(leaf.Cert.DNSNames, l.req.DNSNames) && len(leaf.Cert.IPAddresses) == len(l.req.IPs)
	}
	if key != "" {
		leafVerdicts.put(key, v)
	}
	return v
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// keyPairs remembers parsed certificates and keys by Secret version.
var keyPairs = newPKIMemo[*pki.KeyPair](1 << 16)

// cachedKeyPair parses the certificate under certKey, and its key under
// keyKey if given.
func cachedKeyPair(s *corev1.Secret, certKey, keyKey string) (*pki.KeyPair, error) {
	key := ""
	if s.UID != "" && s.ResourceVersion != "" {
		key = strings.Join([]string{string(s.UID), s.ResourceVersion, certKey, keyKey}, "\x00")
		if k, ok := keyPairs.get(key); ok {
			return k, nil
		}
	}
	var keyPEM []byte
	if keyKey != "" {
		keyPEM = plan.SecretValue(s, keyKey)
	}
	k, err := pki.Parse(plan.SecretValue(s, certKey), keyPEM)
	if err != nil {
		return nil, err
	}
	if key != "" {
		keyPairs.put(key, k)
	}
	return k, nil
}

// pkiMemo is a bounded map shared by syncs: one entry per Secret version
// and use, forgotten all at once when full (tens of thousands of Secrets;
// each is parsed again once).
type pkiMemo[V any] struct {
	max int
	mu  sync.Mutex
	m   map[string]V
}

func newPKIMemo[V any](max int) *pkiMemo[V] { return &pkiMemo[V]{max: max, m: map[string]V{}} }

func (m *pkiMemo[V]) get(key string) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[key]
	return v, ok
}

func (m *pkiMemo[V]) put(key string, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.m) >= m.max {
		clear(m.m)
	}
	m.m[key] = v
}
