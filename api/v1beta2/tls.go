package v1beta2

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TLSPolicy makes members serve mutual TLS: with certificates the user
// issues (static, the CoreOS operator's shape) or with certificates the
// hook issues and rotates itself (auto).
// +kubebuilder:validation:XValidation:rule="!(has(self.static) && has(self.auto))",message="spec.TLS: static and auto cannot be combined: static names Secrets you issue, auto has the hook issue them"
type TLSPolicy struct {
	// +optional
	Static *StaticTLS `json:"static,omitempty"`
	// Auto has the hook issue the cluster's CAs and certificates, as
	// Secret children of the EtcdCluster, and renew them before they
	// expire (see docs/tls.md).
	// +optional
	Auto *AutoTLS `json:"auto,omitempty"`
}

// StaticTLS names Secrets holding certificates made by the user, in the
// cluster's namespace. Leaf certificates rotate by updating the Secrets in
// place: etcd reads them on every handshake, and the hook on the next sync.
type StaticTLS struct {
	// +optional
	Member *MemberSecret `json:"member,omitempty"`
	// OperatorSecret holds the client certificate the hook, and backups,
	// talk to the members with: etcd-client.crt, etcd-client.key and
	// etcd-client-ca.crt (the CA of the members' server certificates).
	// Set together with member.serverSecret.
	// +optional
	OperatorSecret string `json:"operatorSecret,omitempty"`
}

// MemberSecret names the Secrets mounted into each member Pod.
type MemberSecret struct {
	// PeerSecret holds peer.crt, peer.key and peer-ca.crt: members serve
	// and call each other with it, and accept only peers it signs.
	// +optional
	PeerSecret string `json:"peerSecret,omitempty"`
	// ServerSecret holds server.crt, server.key and server-ca.crt: members
	// serve clients with it, and accept only clients it signs.
	// +optional
	ServerSecret string `json:"serverSecret,omitempty"`
}

// PeerSecret is the Secret spec.TLS.static has members serve their peers
// with; "" for plain peer traffic or auto TLS (see
// EtcdCluster.TLSSecrets for the names whatever the policy).
func (t *TLSPolicy) PeerSecret() string {
	if t == nil || t.Static == nil || t.Static.Member == nil {
		return ""
	}
	return t.Static.Member.PeerSecret
}

// ServerSecret is the Secret spec.TLS.static has members serve clients
// with; "" for plain client traffic or auto TLS.
func (t *TLSPolicy) ServerSecret() string {
	if t == nil || t.Static == nil || t.Static.Member == nil {
		return ""
	}
	return t.Static.Member.ServerSecret
}

// OperatorSecret is the Secret spec.TLS.static names for the hook's client
// certificate; "" otherwise.
func (t *TLSPolicy) OperatorSecret() string {
	if t == nil || t.Static == nil {
		return ""
	}
	return t.Static.OperatorSecret
}

// IsSecurePeer reports whether members talk to each other over TLS.
func (t *TLSPolicy) IsSecurePeer() bool { return t.IsAuto() || t.PeerSecret() != "" }

// IsSecureClient reports whether members serve clients over TLS.
func (t *TLSPolicy) IsSecureClient() bool { return t.IsAuto() || t.ServerSecret() != "" }

// IsAuto reports whether the hook issues the certificates.
func (t *TLSPolicy) IsAuto() bool { return t != nil && t.Auto != nil }

// The keys of the CoreOS TLS Secrets: what users issue, and what members,
// the hook and backups read.
const (
	PeerCertKey = "peer.crt"
	PeerKeyKey  = "peer.key"
	PeerCAKey   = "peer-ca.crt"

	ServerCertKey = "server.crt"
	ServerKeyKey  = "server.key"
	ServerCAKey   = "server-ca.crt"

	ClientCertKey = "etcd-client.crt"
	ClientKeyKey  = "etcd-client.key"
	ClientCAKey   = "etcd-client-ca.crt"
)

// AutoTLS is how long the certificates the hook issues are valid, and how
// long before they expire it renews them. The hook issues two CAs (one
// for peers, one for clients and servers, so that no client certificate
// is accepted on the peer port), each valid twice as long as a leaf.
// +kubebuilder:validation:XValidation:rule="!has(self.validity) || duration(self.validity) >= duration('5m')",message="spec.TLS.auto.validity: at least 5m"
// +kubebuilder:validation:XValidation:rule="!has(self.renewBefore) || (duration(self.renewBefore) >= duration('1m') && duration(self.renewBefore) < (has(self.validity) ? duration(self.validity) : duration('8760h')))",message="spec.TLS.auto.renewBefore: at least 1m, and shorter than validity"
type AutoTLS struct {
	// Validity of a leaf certificate [8760h].
	// +optional
	Validity *metav1.Duration `json:"validity,omitempty"`
	// RenewBefore: a certificate is renewed this long before it expires
	// [720h, or a third of validity when that is shorter].
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
}

// The defaults of spec.TLS.auto, and the shortest validity accepted (so
// that rotation can be watched in a test).
const (
	DefaultCertValidity    = 8760 * time.Hour
	DefaultCertRenewBefore = 720 * time.Hour
	MinCertValidity        = 5 * time.Minute
	MinCertRenewBefore     = time.Minute
)

// LeafValidity is how long a leaf certificate is issued for.
func (a *AutoTLS) LeafValidity() time.Duration {
	if a == nil || a.Validity == nil || a.Validity.Duration <= 0 {
		return DefaultCertValidity
	}
	return a.Validity.Duration
}

// CAValidity is how long a CA is issued for: twice a leaf's, so that a
// leaf is renewed under a CA several times before the CA itself rotates.
func (a *AutoTLS) CAValidity() time.Duration { return 2 * a.LeafValidity() }

// RenewalLead is how long before its expiry a certificate is renewed.
func (a *AutoTLS) RenewalLead() time.Duration {
	if a != nil && a.RenewBefore != nil && a.RenewBefore.Duration > 0 {
		return a.RenewBefore.Duration
	}
	return min(DefaultCertRenewBefore, a.LeafValidity()/3)
}

// TLSSecretNames are the Secrets a cluster's members and the hook use,
// whichever policy names them; "" where there is none.
type TLSSecretNames struct {
	Peer, Server, Operator string
	// CA is the Secret with the CAs' keys, with auto TLS only.
	CA string
}

// The suffixes of the Secrets spec.TLS.auto renders: <cluster>-ca and so
// on.
const (
	AutoCASuffix       = "-ca"
	AutoPeerSuffix     = "-peer-tls"
	AutoServerSuffix   = "-server-tls"
	AutoOperatorSuffix = "-operator-tls"
)

// TLSSecrets names the cluster's TLS Secrets: those spec.TLS.static names,
// or those spec.TLS.auto renders.
func (c *EtcdCluster) TLSSecrets() TLSSecretNames {
	t := c.Spec.TLS
	if t.IsAuto() {
		return c.AutoTLSSecrets()
	}
	return TLSSecretNames{Peer: t.PeerSecret(), Server: t.ServerSecret(), Operator: t.OperatorSecret()}
}

// AutoTLSSecrets names the Secrets spec.TLS.auto renders, whatever the
// spec says now (a cluster moving away from them still has them).
func (c *EtcdCluster) AutoTLSSecrets() TLSSecretNames {
	return TLSSecretNames{
		Peer: c.Name + AutoPeerSuffix, Server: c.Name + AutoServerSuffix,
		Operator: c.Name + AutoOperatorSuffix, CA: c.Name + AutoCASuffix,
	}
}
