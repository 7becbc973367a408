package etcdcluster

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// spec.TLS.auto: the hook is the cluster's certificate authority, with no
// state of its own. Everything it issued is in the EtcdCluster's Secret
// children, which Metacontroller sends back in every request:
//
//   - <cluster>-ca holds two CAs, one for peers and one for clients and
//     servers, so that no client certificate is accepted on the peer port;
//   - <cluster>-peer-tls, <cluster>-server-tls and <cluster>-operator-tls
//     hold the leaves, in the CoreOS Secrets' shape.
//
// A certificate is made only when its Secret is absent, or when it is due
// for renewal (or not signed by the current CA). Otherwise the observed
// Secret is answered unchanged, so syncs are idempotent.
//
// No two CAs for one cluster. A leaf is only ever signed by a CA the
// request carried back from the API server, never by one made in the same
// sync: a sync that makes a CA renders the CA Secret alone. Two syncs that
// both saw no CA (a cache that lags) both answer a create; the API server
// takes the first, and Metacontroller's second create fails with
// AlreadyExists. A CA added to an existing Secret (a rotation) is an update
// carrying the observed resourceVersion, so a stale one fails with a
// conflict. Whatever the race, the CA that leaves are signed with is the
// one the API server holds.
//
// Rotation. etcd reads its leaf files on every handshake, so a leaf is
// re-issued in place and no member restarts. It loads the files of trusted
// CAs once, at start (etcd-io/etcd#11555), so a new CA goes in four steps:
//  1. the CA is due (renewBefore ahead of its expiry): a new CA pair is made
//     and added to <cluster>-ca as next;
//  2. the trust bundles in the leaf Secrets hold both CAs, and each member
//     Pod carries AnnotationTrustedCA of the newest CA it trusts: members
//     whose Pod trusts less roll, through the quorum-safe rollout;
//  3. once every member Pod trusts the new CA and is ready, it becomes the
//     signing CA and every leaf is re-issued under it, in place. The old CA
//     stays in the bundles for now: a member serves its old leaf until the
//     kubelet refreshes its files;
//  4. once every leaf is observed under the new CA, the CA Secret records
//     the moment (AnnotationLeavesReissued), and a kubelet's Secret delay
//     later (Observed.SecretPropagation) the old CA leaves the bundles. The
//     members, which trust what they loaded at start, roll once more: from
//     then on nothing the old CA signed is accepted.

// AnnotationTrustedCA on a member Pod lists the fingerprints of the CAs
// its etcd was started trusting, the newest first, comma-separated.
const AnnotationTrustedCA = v1beta2.Group + "/trusted-ca"

// AnnotationRotateCA on an EtcdCluster asks for new CAs now, through the
// same steps as an expiring CA's: a key believed exposed, or a policy's
// schedule. Any new value asks once; the CA Secret records the value it
// was made for (AnnotationCAMadeFor), so an annotation left in place (in
// Git, say) never rotates again.
const AnnotationRotateCA = v1beta2.Group + "/rotate-ca"

// AnnotationCAMadeFor on the CA Secret is the AnnotationRotateCA value the
// newest CA was made for.
const AnnotationCAMadeFor = v1beta2.Group + "/ca-made-for"

// AnnotationLeavesReissued on the CA Secret, while a CA on its way out is
// still trusted, is when every leaf was first observed under the signing
// CA (RFC 3339). The old CA is dropped a kubelet's Secret delay later.
const AnnotationLeavesReissued = v1beta2.Group + "/leaves-reissued"

// Reasons of CertificatesReady.
const (
	ReasonCertificatesValid   = "CertificatesValid"
	ReasonCertificatesIssuing = "CertificatesIssuing"
	ReasonRotatingCA          = "RotatingCA"
	ReasonRenewalOverdue      = "RenewalOverdue"
	ReasonCertificateExpiring = "CertificateExpiring"
	ReasonCASecretInvalid     = "CASecretInvalid"
	ReasonTLSSecretTaken      = "TLSSecretTaken"
)

// certificates is what this sync answers for spec.TLS.auto.
type certificates struct {
	names v1beta2.TLSSecretNames
	// secrets are the Secret children, rendered.
	secrets []*corev1.Secret
	// ready: every Secret a member mounts is observed, so members may run.
	ready bool
	// trust is AnnotationTrustedCA of a member Pod rendered now.
	trust    string
	status   []v1beta2.CertificateStatus
	rotation string
	// static is status.TLS.static while members move from it.
	static *v1beta2.StaticTLS
	// leaving: the spec asks for spec.TLS.static, and members move to it
	// from the hook's Secrets (see tlsmove.go). mountStatic: member Pods
	// rendered now mount spec.TLS.static's Secrets; done: none mounts the
	// hook's any more, which go.
	leaving, mountStatic, done bool
	// problem stops the cluster where it is (reason, message).
	problem, problemMessage string
	// overdue names certificates past their renewal.
	overdue []string
	// wake is the next moment something is due.
	wake time.Time
	// leaves are the leaves as rendered, when they were (not while a new
	// CA waits to be stored).
	leaves []leafExpiry
}

type leafExpiry struct {
	name, secret string
	notAfter     time.Time
}

// planCertificates decides the Secret children of spec.TLS.auto.
func (p *planner) planCertificates() *certificates {
	c := p.o.Cluster
	leaving := !p.spec.TLS.IsAuto()
	cs := &certificates{names: p.tlsNames(), leaving: leaving}
	if leaving {
		cs.names = c.AutoTLSSecrets()
	}
	for _, name := range []string{cs.names.CA, cs.names.Peer, cs.names.Server, cs.names.Operator} {
		if s, ok := p.o.Secrets[name]; ok && !p.ownSecret(s) {
			cs.problem, cs.problemMessage = ReasonTLSSecretTaken, fmt.Sprintf("Secret %q exists in namespace %s and is not this cluster's: spec.TLS.auto renders Secrets of that name; rename or delete it", name, c.Namespace)
			return cs
		}
	}
	auth, err := p.observedAuthority(cs.names)
	if err != nil {
		cs.problem, cs.problemMessage = ReasonCASecretInvalid, err.Error()
		return cs
	}
	now, auto := p.o.Now, p.spec.TLS.Auto
	lead := auto.RenewalLead()
	move, err := p.staticMove(auth, leaving)
	if err != nil {
		cs.problem, cs.problemMessage = ReasonTLSSecretInvalid, err.Error()
		return cs
	}
	if move != nil && !leaving {
		cs.static = move.from
	}
	if move != nil && auth != nil && auth.cur.fingerprint() == move.cas.fingerprint() {
		auth.static = move
	}
	switch {
	case leaving && auth == nil:
		// Nothing to leave: the CA Secret went with the last member.
		cs.mountStatic, cs.done = true, true
		return cs
	case leaving && auth.next == nil && auth.static == nil:
		// Moving to spec.TLS.static: its CAs come in as next, without
		// keys, and the members roll to trust them.
		cs.trust = auth.trust()
		nextAuth := *auth
		nextAuth.next, nextAuth.changed = move.cas, true
		cs.secrets = append(cs.secrets, p.caSecret(cs.names.CA, &nextAuth))
		cs.rotation = "moving to spec.TLS.static: its CAs are added to the bundles; the members will be restarted one at a time to trust them"
		p.keepLeafSecrets(cs)
		p.certificateStatus(cs, auth, lead)
		return cs
	case leaving && auth.next != nil && p.everyMemberTrusts(auth.next.fingerprint()):
		auth = &authority{cur: auth.next, old: trustOnly(auth.cur), madeFor: auth.madeFor, changed: true}
		if move != nil && auth.cur.fingerprint() == move.cas.fingerprint() {
			auth.static = move
		}
	case leaving:
	case auth == nil && move != nil:
		// Members started under spec.TLS.static: their CAs are taken in
		// as the signing ones (without keys, which the hook never had),
		// their leaves are copied, and new CAs come in as next, as in a
		// rotation. The copies are no leaves of a CA made now, only
		// bundles that also trust it.
		next, err := newCAPair(c, now, now.Add(auto.CAValidity()))
		if err != nil {
			cs.problem, cs.problemMessage = ReasonCASecretInvalid, err.Error()
			return cs
		}
		auth = &authority{cur: move.cas, next: next, static: move, madeFor: p.rotateRequest(), changed: true}
	case auth == nil:
		// The first CAs. Nothing is signed with them before they come
		// back from the API server.
		pair, err := newCAPair(c, now, now.Add(auto.CAValidity()))
		if err != nil {
			cs.problem, cs.problemMessage = ReasonCASecretInvalid, err.Error()
			return cs
		}
		cs.secrets = []*corev1.Secret{p.caSecret(cs.names.CA, &authority{cur: pair, madeFor: p.rotateRequest()})}
		return cs
	case auth.next == nil && (!auth.cur.canSign() || !now.Before(auth.cur.notAfter().Add(-lead)) || p.rotateRequest() != auth.madeFor):
		next, err := newCAPair(c, now, now.Add(auto.CAValidity()))
		if err != nil {
			cs.problem, cs.problemMessage = ReasonCASecretInvalid, err.Error()
			return cs
		}
		// Only the CA Secret changes: the bundles take the new CA once it
		// is observed.
		cs.trust = auth.trust()
		nextAuth := *auth
		nextAuth.next, nextAuth.madeFor, nextAuth.changed = next, p.rotateRequest(), true
		cs.secrets = append(cs.secrets, p.caSecret(cs.names.CA, &nextAuth))
		cs.rotation = "a new CA is made; the members will be restarted one at a time to trust it"
		p.keepLeafSecrets(cs)
		p.certificateStatus(cs, auth, lead)
		return cs
	case auth.next != nil && p.everyMemberTrusts(auth.next.fingerprint()):
		// Every member runs on this CA's Secrets: spec.TLS.static's, if
		// they moved from it, are needed no more.
		auth = &authority{cur: auth.next, old: trustOnly(auth.cur), madeFor: auth.madeFor, changed: true}
		cs.static = nil
	}
	if auth.old != nil && (!now.Before(auth.old.notAfter()) || (!auth.leavesSince.IsZero() && !now.Before(auth.leavesSince.Add(p.secretPropagation())))) {
		// Expired, or every leaf was re-issued under the signing CA long
		// enough ago for the kubelets to have brought the new files into
		// every Pod: the old CA leaves the bundles, and members, which
		// trust it until they restart, roll (see distrusting).
		auth.old, auth.leavesSince, auth.changed = nil, time.Time{}, true
	}
	if leaving && auth.static != nil && auth.next == nil && auth.old == nil {
		// The members serve spec.TLS.static's leaves, and have had the
		// time to pick them up: they roll onto its Secrets.
		cs.mountStatic = true
		if !p.membersMount(p.o.Cluster.AutoTLSSecrets()) {
			cs.done = true
			return cs
		}
	}
	switch {
	case leaving && cs.mountStatic:
		cs.rotation = "moving to spec.TLS.static: the members are restarted one at a time onto its Secrets"
	case leaving && auth.next != nil:
		cs.rotation = "moving to spec.TLS.static: the members are restarted one at a time to trust its CAs"
	case leaving:
		cs.rotation = "moving to spec.TLS.static: its certificates are copied into the hook's Secrets; once the kubelets have brought them into every Pod, the members are restarted one at a time onto its Secrets"
	case auth.next != nil:
		cs.rotation = fmt.Sprintf("members are restarted one at a time to trust the new CA (%s); then every certificate is re-issued under it", auth.next.fingerprint())
		if auth.static != nil {
			cs.rotation = "moving from spec.TLS.static: " + cs.rotation + ", and the CAs of spec.TLS.static are trusted no more"
		}
	case auth.old != nil:
		cs.rotation = fmt.Sprintf("every certificate is re-issued under the new CA (%s); once the kubelets have brought them into every Pod, the old CA (%s) is dropped and the members restart one at a time to trust it no more",
			auth.cur.fingerprint(), auth.old.fingerprint())
	}
	cs.trust = auth.trust()
	cs.ready = true
	leaves := make([]*corev1.Secret, 0, 4)
	allCurrent := true
	specs := p.leafSpecs(cs.names)
	if !leaving {
		// Moving to spec.TLS.static, users' Secrets are kept as they are
		// until the move is over (see secretChildren).
		specs = append(specs, p.userLeafSpecs()...)
	}
	for _, leaf := range specs {
		r, err := p.renderLeaf(leaf, auth, lead)
		if err != nil {
			cs.problem, cs.problemMessage = ReasonCASecretInvalid, err.Error()
			return cs
		}
		allCurrent = allCurrent && r.current
		if r.secret == nil {
			// A user's certificate, while the signing CA is one the hook
			// has no key of: it is issued under the next one.
			continue
		}
		if _, observed := p.o.SecretChildren[leaf.secret]; !observed && !strings.HasPrefix(leaf.name, "user:") {
			// A user's certificate is no member's: members go on without.
			cs.ready = false
		}
		leaves = append(leaves, r.secret)
		cs.leaves = append(cs.leaves, leafExpiry{leaf.name, leaf.secret, r.notAfter})
	}
	if auth.old != nil && auth.leavesSince.IsZero() && allCurrent && cs.ready {
		// Every leaf is observed under the signing CA: the kubelets'
		// delay starts now.
		auth.leavesSince = now
	}
	if auth.old != nil && !auth.leavesSince.IsZero() {
		cs.wakeAt(auth.leavesSince.Add(p.secretPropagation()))
	}
	cs.secrets = append(append(cs.secrets, p.caSecret(cs.names.CA, auth)), leaves...)
	p.certificateStatus(cs, auth, lead)
	return cs
}

// secretPropagation is how long the kubelets take to bring an updated
// Secret into the Pods that mount it.
func (p *planner) secretPropagation() time.Duration {
	if d := p.o.SecretPropagation; d > 0 {
		return d
	}
	return DefaultSecretPropagation
}

// DefaultSecretPropagation: a kubelet's sync period (1m) and the delay of
// its Secret cache (1m at most, by default).
const DefaultSecretPropagation = 2 * time.Minute

func (cs *certificates) wakeAt(t time.Time) {
	if cs.wake.IsZero() || t.Before(cs.wake) {
		cs.wake = t
	}
}

// ownSecret: a Secret this cluster's hook rendered: a child, or one whose
// controller is the cluster (the request's children may lag a create
// the related objects already show).
func (p *planner) ownSecret(s *corev1.Secret) bool {
	if _, ok := p.o.SecretChildren[s.Name]; ok {
		return true
	}
	ref := metav1.GetControllerOf(s)
	return ref != nil && ref.UID == p.o.Cluster.UID && p.o.Cluster.UID != ""
}

// everyMemberTrusts: every member Pod was started trusting the CA and
// serves, and none is on its way out.
func (p *planner) everyMemberTrusts(fingerprint string) bool {
	for _, pod := range p.o.Pods {
		if pod.DeletionTimestamp != nil || newestTrusted(pod) != fingerprint || !podReady(pod) {
			return false
		}
	}
	return true
}

// rotateRequest is AnnotationRotateCA's value.
func (p *planner) rotateRequest() string { return p.o.Cluster.Annotations[AnnotationRotateCA] }

func (p *planner) secretChild(name string, data map[string][]byte) *corev1.Secret {
	c := p.o.Cluster
	if p.secretLabels == nil {
		// One map for every Secret of the answer, which is only encoded.
		p.secretLabels = selectorLabels(c.Name)
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: p.secretLabels},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

// keepLeafSecrets answers the observed leaf Secrets as they are.
func (p *planner) keepLeafSecrets(cs *certificates) {
	cs.ready = true
	for _, name := range []string{cs.names.Peer, cs.names.Server, cs.names.Operator} {
		s, ok := p.o.SecretChildren[name]
		if !ok {
			cs.ready = false
			continue
		}
		cs.secrets = append(cs.secrets, p.secretChild(name, s.Data))
		for _, k := range []struct{ name, key string }{{"peer", v1beta2.PeerCertKey}, {"server", v1beta2.ServerCertKey}, {"operator", v1beta2.ClientCertKey}} {
			if len(s.Data[k.key]) > 0 {
				if leaf, err := cachedKeyPair(s, k.key, ""); err == nil {
					cs.leaves = append(cs.leaves, leafExpiry{k.name, name, leaf.Cert.NotAfter})
				}
			}
		}
	}
}
