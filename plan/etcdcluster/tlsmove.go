package etcdcluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/pki"
)

// A running cluster moves from spec.TLS.static to spec.TLS.auto with its
// data and its members, as a CA rotation whose outgoing CAs are the
// user's:
//  1. The spec says auto, and the members mount the Secrets that
//     status.TLS.static names (recorded under spec.TLS.static, so that
//     the customize hook still relates them). The hook renders its CA
//     Secret with the user's CAs as the signing ones, without keys, and
//     new CAs as next; its leaf Secrets get copies of the user's leaves,
//     with bundles that trust both.
//  2. Members roll onto the hook's Secrets, through the quorum-safe
//     rollout: each new Pod trusts both CAs and serves the user's leaves,
//     which every member, old or new, trusts.
//  3. Once every member trusts the new CAs, they sign, and every leaf is
//     re-issued in place, as in any rotation.
//  4. A kubelet's Secret delay later the user's CAs leave the bundles, and
//     the members roll once more to trust them no more: certificates the
//     user's CAs sign are refused from then on.
//
// A member on a claim keeps its ID and its data through both rolls; one
// on an emptyDir is replaced, as in every rollout.

// staticMove is the move from spec.TLS.static while the hook's CA
// Secret still holds its CAs.
type staticMove struct {
	from *v1beta2.StaticTLS
	// cas are the CAs spec.TLS.static trusted, without keys: peer-ca.crt,
	// and the client side's server-ca.crt and etcd-client-ca.crt.
	cas                    *caPair
	peer, server, operator *corev1.Secret
}

// staticMove reads the move from spec.TLS.static, when one runs: nil
// when status.TLS.static names nothing, or when the observed CA Secret's
// signing CAs are no longer the user's (the move is past step 2).
func (p *planner) staticMove(auth *authority, leaving bool) (*staticMove, error) {
	from := movingFrom(p.o.Cluster)
	if leaving {
		from = p.spec.TLS.Static
	}
	if from == nil || (auth == nil && !p.membersMount(staticNames(from))) {
		return nil, nil
	}
	m := &staticMove{from: from}
	for _, s := range []struct {
		name, field string
		into        **corev1.Secret
	}{
		{from.Member.PeerSecret, "peerSecret", &m.peer},
		{from.Member.ServerSecret, "serverSecret", &m.server},
		{from.OperatorSecret, "operatorSecret", &m.operator},
	} {
		secret, ok := p.o.Secrets[s.name]
		if !ok {
			if auth != nil && !leaving {
				// Past the copies: the user's Secrets are not needed
				// any more if the CAs are not theirs.
				return nil, nil
			}
			if leaving {
				return nil, fmt.Errorf("moving to spec.TLS.static: Secret %q (spec.TLS.static, %s) not found in namespace %s", s.name, s.field, p.o.Cluster.Namespace)
			}
			return nil, fmt.Errorf("moving from spec.TLS.static to spec.TLS.auto: Secret %q (status.TLS.static, %s), which the members run with, not found in namespace %s", s.name, s.field, p.o.Cluster.Namespace)
		}
		*s.into = secret
	}
	peer, err := cachedKeyPair(m.peer, v1beta2.PeerCAKey, "")
	if err != nil {
		return nil, fmt.Errorf("moving from spec.TLS.static: Secret %q, key %q: %w", m.peer.Name, v1beta2.PeerCAKey, err)
	}
	client, err := pki.ParseTrust(m.server.Data[v1beta2.ServerCAKey], m.operator.Data[v1beta2.ClientCAKey])
	if err != nil {
		return nil, fmt.Errorf("moving from spec.TLS.static: Secrets %q and %q, keys %q and %q: %w", m.server.Name, m.operator.Name, v1beta2.ServerCAKey, v1beta2.ClientCAKey, err)
	}
	m.cas = &caPair{peer: peer, client: client}
	if !leaving && auth != nil && auth.cur.fingerprint() != m.cas.fingerprint() {
		return nil, nil
	}
	return m, nil
}

// movingFrom is status.TLS.static of a cluster whose spec asks for auto;
// nil otherwise, or when it names less than TLS on both sides.
func movingFrom(c *v1beta2.EtcdCluster) *v1beta2.StaticTLS {
	st := c.Status.TLS
	if !c.Spec.TLS.IsAuto() || st == nil || st.Static == nil || st.Static.Member == nil {
		return nil
	}
	if from := st.Static; from.Member.PeerSecret != "" && from.Member.ServerSecret != "" && from.OperatorSecret != "" {
		return from
	}
	return nil
}

func staticNames(from *v1beta2.StaticTLS) v1beta2.TLSSecretNames {
	return v1beta2.TLSSecretNames{Peer: from.Member.PeerSecret, Server: from.Member.ServerSecret, Operator: from.OperatorSecret}
}

// membersMount: a member Pod mounts these Secrets.
func (p *planner) membersMount(names v1beta2.TLSSecretNames) bool {
	want := podTLS{peer: names.Peer, server: names.Server}
	for _, pod := range p.o.Pods {
		if observedPodTLS(pod) == want {
			return true
		}
	}
	return false
}

// leaf is the user's leaf a Secret of the hook copies while the move
// runs, with its expiry; false for a user's certificate of spec.auth.
func (m *staticMove) leaf(l leafSpec) (cert, key []byte, notAfter time.Time, ok bool) {
	var s *corev1.Secret
	switch l.name {
	case "peer":
		s = m.peer
	case "server":
		s = m.server
	case "operator":
		s = m.operator
	default:
		return nil, nil, time.Time{}, false
	}
	cert, key = s.Data[l.certKey], s.Data[l.keyKey]
	if parsed, err := cachedKeyPair(s, l.certKey, ""); err == nil {
		notAfter = parsed.Cert.NotAfter
	}
	return cert, key, notAfter, true
}

// trusted are the fingerprints a member Pod's AnnotationTrustedCA lists,
// the newest first.
func trusted(pod *corev1.Pod) []string {
	v := pod.Annotations[AnnotationTrustedCA]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

func newestTrusted(pod *corev1.Pod) string {
	if t := trusted(pod); len(t) > 0 {
		return t[0]
	}
	return ""
}

// distrusting: the member's etcd was started before the newest CA it must
// trust was made, or trusting a CA the bundles dropped since; only a new
// Pod loads its trust anew.
func (p *planner) distrusting(pod *corev1.Pod) bool {
	want := p.trustMarker()
	if want == "" || pod.Annotations[AnnotationTrustedCA] == want {
		return false
	}
	wanted := strings.Split(want, ",")
	have := trusted(pod)
	if len(have) == 0 || have[0] != wanted[0] {
		return true
	}
	for _, fp := range have[1:] {
		if !slices.Contains(wanted, fp) {
			return true
		}
	}
	return false
}

// leavingAuto: the spec asks for spec.TLS.static, with TLS on both sides
// and an operatorSecret, and the hook's CA Secret of spec.TLS.auto is
// still there: members move from the hook's Secrets to the user's.
func (p *planner) leavingAuto() bool {
	t := p.spec.TLS
	if t.IsAuto() || t.PeerSecret() == "" || t.ServerSecret() == "" || t.OperatorSecret() == "" {
		return false
	}
	_, ok := p.o.SecretChildren[p.o.Cluster.AutoTLSSecrets().CA]
	return ok
}

// remounting: the member Pod mounts other TLS Secrets than a Pod rendered
// now would, which happens only while members move between spec.TLS.static
// and auto (any other difference is refused: see tlsChangeRefused).
func (p *planner) remounting(pod *corev1.Pod) bool {
	if p.certs == nil {
		return false
	}
	want := p.mountedSecrets()
	return observedPodTLS(pod) != podTLS{peer: want.Peer, server: want.Server}
}

// staticStatus is status.TLS.static: spec.TLS.static, or while members
// move from it, what it was.
func (p *planner) staticStatus() *v1beta2.StaticTLS {
	if p.spec.TLS.IsAuto() {
		if p.certs != nil && p.certs.problem == "" {
			return p.certs.static
		}
		if st := p.o.Cluster.Status.TLS; st != nil {
			return st.Static
		}
		return nil
	}
	if p.spec.TLS == nil || p.spec.TLS.Static == nil {
		return nil
	}
	return p.spec.TLS.Static
}
