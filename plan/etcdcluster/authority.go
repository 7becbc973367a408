package etcdcluster

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/pki"
	"github.com/etcdhook/etcd-hook/plan"
)

// The CA Secret of spec.TLS.auto, read and rendered: the authority is its
// CAs (the signing pair, the one being brought in, the one on its way
// out) and what the Secret records of them. See autotls.go for how a sync
// decides it.

// Keys of the CA Secret. next- and old- prefix the CA being brought in,
// and the one on its way out (kept for trust only, without its key).
const (
	caPeerCert   = "peer-ca.crt"
	caPeerKey    = "peer-ca.key"
	caClientCert = "client-ca.crt"
	caClientKey  = "client-ca.key"
	nextCA       = "next-"
	oldCA        = "old-"
)

// caPair is one generation of the two CAs.
type caPair struct{ peer, client *pki.KeyPair }

func (c *caPair) notAfter() time.Time {
	if c.client.Cert.NotAfter.Before(c.peer.Cert.NotAfter) {
		return c.client.Cert.NotAfter
	}
	return c.peer.Cert.NotAfter
}

// trust is AnnotationTrustedCA of a member Pod started now: the
// fingerprints of the CAs its bundles hold, the newest first.
func (a *authority) trust() string {
	fps := make([]string, 0, 3)
	for _, c := range []*caPair{a.next, a.cur, a.old} {
		if c != nil {
			fps = append(fps, c.fingerprint())
		}
	}
	return strings.Join(fps, ",")
}

func (c *caPair) canSign() bool { return c.peer.CanSign() && c.client.CanSign() }

// fingerprint names the generation: its peer CA's fingerprint.
func (c *caPair) fingerprint() string { return c.peer.Fingerprint() }

// authority is the CA Secret as observed: the signing pair, the one being
// brought in, and the one on its way out.
type authority struct {
	cur, next, old *caPair
	// madeFor is AnnotationCAMadeFor.
	madeFor string
	// leavesSince is AnnotationLeavesReissued: while an old CA is still
	// trusted, since when every leaf has been observed under cur.
	leavesSince time.Time
	// static is the move from spec.TLS.static, while cur is its CAs.
	static *staticMove
	// observed is the CA Secret it was read from, and changed says the
	// sync changed it since: an unchanged one is answered with its data.
	observed *corev1.Secret
	changed  bool
}

// observedAuthority reads the CA Secret; nil when there is none. With
// none while leaf Secrets exist (someone deleted it), the CAs the members
// trust are read from the leaf Secrets' bundles, without their keys: a
// CA rotation then follows, as for an expiring CA.
func (p *planner) observedAuthority(names v1beta2.TLSSecretNames) (*authority, error) {
	s, ok := p.o.SecretChildren[names.CA]
	if !ok {
		peer, server := p.o.SecretChildren[names.Peer], p.o.SecretChildren[names.Server]
		if peer == nil || server == nil {
			return nil, nil
		}
		pair, err := parsePair(peer, v1beta2.PeerCAKey, "", server, v1beta2.ServerCAKey, "")
		if err != nil {
			return nil, fmt.Errorf("the CA Secret %q is gone, and the CAs the members trust cannot be read from their Secrets: %w", names.CA, err)
		}
		// Made for whatever is asked now: only a lost key rotates.
		return &authority{cur: pair, madeFor: p.rotateRequest()}, nil
	}
	// The signing CAs have no keys when they were read back from the
	// members' bundles (a lost CA Secret) or taken in from
	// spec.TLS.static: new ones are on their way.
	peerKey, clientKey := caPeerKey, caClientKey
	if len(s.Data[caPeerKey]) == 0 && len(s.Data[caClientKey]) == 0 {
		peerKey, clientKey = "", ""
	}
	cur, err := parsePair(s, caPeerCert, peerKey, s, caClientCert, clientKey)
	if err != nil {
		return nil, fmt.Errorf("the CA Secret %q: %w; delete it to have the CAs made again (the members then restart, one at a time, to trust the new ones)", names.CA, err)
	}
	auth := &authority{cur: cur, madeFor: s.Annotations[AnnotationCAMadeFor], observed: s}
	if at, err := time.Parse(time.RFC3339, s.Annotations[AnnotationLeavesReissued]); err == nil {
		auth.leavesSince = at
	}
	if len(s.Data[nextCA+caPeerCert]) > 0 {
		// Without keys: spec.TLS.static's CAs, which the members move to.
		peerKey, clientKey := nextCA+caPeerKey, nextCA+caClientKey
		if len(s.Data[peerKey]) == 0 && len(s.Data[clientKey]) == 0 {
			peerKey, clientKey = "", ""
		}
		if auth.next, err = parsePair(s, nextCA+caPeerCert, peerKey, s, nextCA+caClientCert, clientKey); err != nil {
			return nil, fmt.Errorf("the CA Secret %q, the CA being brought in: %w", names.CA, err)
		}
	}
	if len(s.Data[oldCA+caPeerCert]) > 0 {
		if auth.old, err = parsePair(s, oldCA+caPeerCert, "", s, oldCA+caClientCert, ""); err != nil {
			return nil, fmt.Errorf("the CA Secret %q, the CA on its way out: %w", names.CA, err)
		}
	}
	return auth, nil
}

func parsePair(peerSecret *corev1.Secret, peerCert, peerKey string, clientSecret *corev1.Secret, clientCert, clientKey string) (*caPair, error) {
	peer, err := parseCA(peerSecret, peerCert, peerKey)
	if err != nil {
		return nil, err
	}
	client, err := parseCA(clientSecret, clientCert, clientKey)
	if err != nil {
		return nil, err
	}
	return &caPair{peer: peer, client: client}, nil
}

func parseCA(s *corev1.Secret, certKey, keyKey string) (*pki.KeyPair, error) {
	var key []byte
	if keyKey != "" {
		if key = plan.SecretValue(s, keyKey); len(key) == 0 {
			return nil, fmt.Errorf("key %q is missing", keyKey)
		}
	}
	k, err := cachedKeyPair(s, certKey, keyKey)
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", certKey, err)
	}
	return k, nil
}

func trustOnly(c *caPair) *caPair {
	return &caPair{peer: c.peer.CertOnly(), client: c.client.CertOnly()}
}

func newCAPair(c *v1beta2.EtcdCluster, now, notAfter time.Time) (*caPair, error) {
	stamp := now.UTC().Format(time.RFC3339)
	peer, err := pki.NewCA(fmt.Sprintf("%s/%s peer CA %s", c.Namespace, c.Name, stamp), now, notAfter)
	if err != nil {
		return nil, err
	}
	client, err := pki.NewCA(fmt.Sprintf("%s/%s client CA %s", c.Namespace, c.Name, stamp), now, notAfter)
	if err != nil {
		return nil, err
	}
	return &caPair{peer: peer, client: client}, nil
}

// caSecret renders the CA Secret of an authority.
func (p *planner) caSecret(name string, a *authority) *corev1.Secret {
	if a.observed != nil && !a.changed {
		s := p.secretChild(name, a.observed.Data)
		s.Annotations = a.annotations()
		return s
	}
	data := map[string][]byte{caPeerCert: a.cur.peer.CertPEM, caClientCert: a.cur.client.CertPEM}
	if a.cur.canSign() {
		data[caPeerKey], data[caClientKey] = a.cur.peer.KeyPEM, a.cur.client.KeyPEM
	}
	if n := a.next; n != nil {
		data[nextCA+caPeerCert], data[nextCA+caClientCert] = n.peer.CertPEM, n.client.CertPEM
		if n.canSign() {
			data[nextCA+caPeerKey], data[nextCA+caClientKey] = n.peer.KeyPEM, n.client.KeyPEM
		}
	}
	if o := a.old; o != nil {
		data[oldCA+caPeerCert], data[oldCA+caClientCert] = o.peer.CertPEM, o.client.CertPEM
	}
	s := p.secretChild(name, data)
	s.Annotations = a.annotations()
	return s
}

func (a *authority) annotations() map[string]string {
	if a.madeFor == "" && (a.old == nil || a.leavesSince.IsZero()) {
		return nil
	}
	out := map[string]string{}
	if a.madeFor != "" {
		out[AnnotationCAMadeFor] = a.madeFor
	}
	if a.old != nil && !a.leavesSince.IsZero() {
		out[AnnotationLeavesReissued] = a.leavesSince.UTC().Format(time.RFC3339)
	}
	return out
}
