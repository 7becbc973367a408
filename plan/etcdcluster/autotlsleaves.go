package etcdcluster

import (
	"bytes"
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
	name string
	// names are the DNS names the leaf carries, joined: part of the key
	// its verdicts are remembered by.
	names                  string
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

// leafSpecs are the cluster's three leaves. They depend on its name,
// namespace and domain alone, so they are made once per cluster and kept
// (leafSpecMemo), not once per sync.
func (p *planner) leafSpecs(names v1beta2.TLSSecretNames) []leafSpec {
	c := p.o.Cluster
	domain := p.spec.Pod.ClusterDomainSuffix()
	if domain == "" {
		domain = "cluster.local"
	}
	key := c.Namespace + "/" + c.Name + "/" + domain + "/" + names.Peer + "/" + names.Server + "/" + names.Operator
	if specs, ok := leafSpecMemo.get(key); ok {
		return specs
	}
	specs := makeLeafSpecs(c, domain, names)
	leafSpecMemo.put(key, specs)
	return specs
}

// leafSpecMemo holds leafSpecs by cluster; its entries are only read.
var leafSpecMemo = newPKIMemo[string, []leafSpec](1 << 14)

func makeLeafSpecs(c *v1beta2.EtcdCluster, domain string, names v1beta2.TLSSecretNames) []leafSpec {
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
	specs := []leafSpec{
		{name: "peer", secret: names.Peer, certKey: v1beta2.PeerCertKey, keyKey: v1beta2.PeerKeyKey, caKey: v1beta2.PeerCAKey, peer: true,
			req: pki.LeafRequest{CommonName: c.Name + " peer", DNSNames: members, IPs: loopback, Usage: pki.Server | pki.Client}},
		// Client as well: etcd's gRPC gateway dials its own port with it.
		{name: "server", secret: names.Server, certKey: v1beta2.ServerCertKey, keyKey: v1beta2.ServerKeyKey, caKey: v1beta2.ServerCAKey,
			req: pki.LeafRequest{CommonName: c.Name + " server", DNSNames: server, IPs: loopback, Usage: pki.Server | pki.Client}},
		{name: "operator", secret: names.Operator, certKey: v1beta2.ClientCertKey, keyKey: v1beta2.ClientKeyKey, caKey: v1beta2.ClientCAKey,
			req: pki.LeafRequest{CommonName: OperatorCommonName, Usage: pki.Client}},
	}
	for i := range specs {
		specs[i].names = strings.Join(specs[i].req.DNSNames, ",")
	}
	return specs
}

// renderedLeaf is one leaf Secret as answered.
type renderedLeaf struct {
	// secret is nil for a user's certificate that cannot be issued yet.
	secret   *corev1.Secret
	notAfter time.Time
	// current: the observed leaf is kept, and it is the signing CA's
	// (or the spec.TLS.static leaf being moved from).
	current bool
}

// renderLeaf answers one leaf Secret: the observed one, with the current
// trust bundle, while its leaf is good; a new leaf otherwise. A leaf that
// is due while a CA rotation is under way waits for the new CA rather
// than be issued again under the one going out (it could only be cut to
// that CA's expiry, which is due too). While members move from
// spec.TLS.static, the leaves are theirs, copied.
func (p *planner) renderLeaf(l leafSpec, a *authority, lead time.Duration) (renderedLeaf, error) {
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
	bundle := p.bundle(l.peer, ca, pick(a.next), pick(a.old))
	now := p.o.Now
	s, observed := p.o.SecretChildren[l.secret]
	keep := func(notAfter time.Time, current bool) renderedLeaf {
		data := s.Data
		if !bytes.Equal(data[l.caKey], bundle) {
			data = maps.Clone(s.Data)
			data[l.caKey] = bundle
		}
		return renderedLeaf{p.secretChild(l.secret, data), notAfter, current}
	}
	if a.static != nil {
		if cert, key, notAfter, ok := a.static.leaf(l); ok {
			if observed && bytes.Equal(s.Data[l.certKey], cert) && bytes.Equal(s.Data[l.keyKey], key) {
				return keep(notAfter, true), nil
			}
			return renderedLeaf{p.secretChild(l.secret, map[string][]byte{l.certKey: cert, l.keyKey: key, l.caKey: bundle}), notAfter, false}, nil
		}
	}
	if observed {
		v := leafVerdictOf(s, l, ca)
		due := !now.Before(v.notAfter.Add(-lead))
		if v.good && (!due || a.next != nil) {
			return keep(v.notAfter, true), nil
		}
		if !ca.CanSign() && v.parses && now.Before(v.notAfter) {
			return keep(v.notAfter, false), nil
		}
	}
	if !ca.CanSign() && strings.HasPrefix(l.name, "user:") {
		return renderedLeaf{}, nil
	}
	req := l.req
	req.NotAfter = now.Add(p.spec.TLS.Auto.LeafValidity())
	leaf, err := ca.Issue(req, now)
	if err != nil {
		return renderedLeaf{}, fmt.Errorf("issuing Secret %q: %w", l.secret, err)
	}
	return renderedLeaf{p.secretChild(l.secret, map[string][]byte{l.certKey: leaf.CertPEM, l.keyKey: leaf.KeyPEM, l.caKey: bundle}), leaf.Cert.NotAfter, false}, nil
}

// bundle is the trust bundle of the peer or the client CAs, made once a
// sync.
func (p *planner) bundle(peer bool, cas ...*pki.KeyPair) []byte {
	i := 0
	if peer {
		i = 1
	}
	if p.bundles[i] == nil {
		p.bundles[i] = pki.Bundle(cas...)
	}
	return p.bundles[i]
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
var leafVerdicts = newPKIMemo[verdictKey, leafVerdict](1 << 16)

// verdictKey: a leaf Secret's version, the key of the leaf in it, the CA
// it must be signed by, and what it must name (leafSpec.names).
type verdictKey struct {
	secret                   secretVersion
	certKey, ca, names, name string
}

// secretVersion is a Secret's UID and resourceVersion: a Secret changes
// only with a new resourceVersion.
type secretVersion struct{ uid, resourceVersion string }

func versionOf(s *corev1.Secret) (secretVersion, bool) {
	return secretVersion{string(s.UID), s.ResourceVersion}, s.UID != "" && s.ResourceVersion != ""
}

func leafVerdictOf(s *corev1.Secret, l leafSpec, ca *pki.KeyPair) leafVerdict {
	version, keyed := versionOf(s)
	key := verdictKey{version, l.certKey, ca.Fingerprint(), l.names, l.req.CommonName}
	if keyed {
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
	if keyed {
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
var keyPairs = newPKIMemo[keyPairKey, *pki.KeyPair](1 << 16)

type keyPairKey struct {
	secret          secretVersion
	certKey, keyKey string
}

// cachedKeyPair parses the certificate under certKey, and its key under
// keyKey if given; without a key, every certificate under certKey.
func cachedKeyPair(s *corev1.Secret, certKey, keyKey string) (*pki.KeyPair, error) {
	version, keyed := versionOf(s)
	key := keyPairKey{version, certKey, keyKey}
	if keyed {
		if k, ok := keyPairs.get(key); ok {
			return k, nil
		}
	}
	var k *pki.KeyPair
	var err error
	if keyKey != "" {
		k, err = pki.Parse(plan.SecretValue(s, certKey), plan.SecretValue(s, keyKey))
	} else {
		// Every certificate of the file: a CA without its key is kept for
		// trust, and a bundle trusts them all.
		k, err = pki.ParseTrust(plan.SecretValue(s, certKey))
	}
	if err != nil {
		return nil, err
	}
	if keyed {
		keyPairs.put(key, k)
	}
	return k, nil
}

// pkiMemo is a bounded map shared by syncs: one entry per Secret version
// and use, forgotten all at once when full (tens of thousands of Secrets;
// each is parsed again once).
type pkiMemo[K comparable, V any] struct {
	max int
	mu  sync.Mutex
	m   map[K]V
}

func newPKIMemo[K comparable, V any](max int) *pkiMemo[K, V] {
	return &pkiMemo[K, V]{max: max, m: map[K]V{}}
}

func (m *pkiMemo[K, V]) get(key K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[key]
	return v, ok
}

func (m *pkiMemo[K, V]) put(key K, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.m) >= m.max {
		clear(m.m)
	}
	m.m[key] = v
}
