package etcdcluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// What status says of the certificates: status.TLS and CertificatesReady,
// for spec.TLS.auto (see autotls.go) and for spec.TLS.static, whose
// certificates the user renews.

// ExpiryWarning is how close to its expiry a certificate the user renews
// turns CertificatesReady False, as the alert on it fires.
const ExpiryWarning = 7 * 24 * time.Hour

// tlsStatus is status.TLS: the certificates as rendered (auto) or as the
// named Secrets hold them (static). One that says what the previous status
// said is the previous status, as decoded: times read back from JSON are
// in another location, and a status that only seems changed is written.
func (p *planner) tlsStatus() *v1beta2.TLSStatus {
	st := p.renderTLSStatus()
	if prev := p.o.Cluster.Status.TLS; sameTLSStatus(prev, st) {
		return prev
	}
	return st
}

func sameTLSStatus(a, b *v1beta2.TLSStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.CARotation == b.CARotation && sameStatic(a.Static, b.Static) && slices.EqualFunc(a.Certificates, b.Certificates, func(x, y v1beta2.CertificateStatus) bool {
		return x.Name == y.Name && x.Secret == y.Secret && x.NotAfter.Equal(&y.NotAfter) &&
			(x.RenewAt == nil) == (y.RenewAt == nil) && (x.RenewAt == nil || x.RenewAt.Equal(y.RenewAt))
	})
}

func sameStatic(a, b *v1beta2.StaticTLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.OperatorSecret == b.OperatorSecret && (a.Member == nil) == (b.Member == nil) && (a.Member == nil || *a.Member == *b.Member)
}

func (p *planner) renderTLSStatus() *v1beta2.TLSStatus {
	switch {
	case p.spec.TLS == nil || (p.spec.TLS.Auto == nil && p.spec.TLS.Static == nil):
		return nil
	case p.certs != nil && len(p.certs.status) > 0:
		return &v1beta2.TLSStatus{Certificates: p.certs.status, CARotation: p.certs.rotation, Static: p.staticStatus()}
	case p.spec.TLS.IsAuto():
		return p.o.Cluster.Status.TLS
	}
	var certs []v1beta2.CertificateStatus
	for _, s := range p.tlsSecrets() {
		secret, ok := p.secret(s.name)
		if !ok {
			continue
		}
		if msg, notAfter := plan.CheckTLSSecretExpiry(secret, s.SecretKeys, s.hostsToServe, p.o.Now); msg == "" {
			certs = append(certs, v1beta2.CertificateStatus{Name: staticCertName(s.SecretKeys), Secret: s.name, NotAfter: metav1.NewTime(notAfter)})
		}
	}
	return &v1beta2.TLSStatus{Certificates: certs, Static: p.staticStatus()}
}

func staticCertName(k plan.SecretKeys) string {
	switch k.Cert {
	case v1beta2.PeerCertKey:
		return "peer"
	case v1beta2.ServerCertKey:
		return "server"
	}
	return "operator"
}

// certificatesCondition is CertificatesReady, or false when the cluster
// has no TLS (and so no such condition).
func (p *planner) certificatesCondition(st *v1beta2.ClusterStatus) (condition, bool) {
	switch {
	case p.spec.TLS == nil || (p.spec.TLS.Auto == nil && p.spec.TLS.Static == nil):
		return condition{}, false
	case p.certs != nil:
		return p.certs.condition(), true
	case p.spec.TLS.IsAuto():
		for _, c := range p.o.Cluster.Status.Conditions {
			if c.Type == v1beta2.ConditionCertificatesReady {
				return condition{c.Status, c.Reason, c.Message}, true
			}
		}
		return condition{metav1.ConditionUnknown, ReasonCertificatesIssuing, "the certificates are not planned in this sync"}, true
	}
	if problems := p.tlsSecretProblems(); len(problems) > 0 {
		return conditionFalse(ReasonTLSSecretInvalid, strings.Join(problems, "; ")), true
	}
	var expiring []string
	if st.TLS != nil {
		for _, c := range st.TLS.Certificates {
			if c.NotAfter.Sub(p.o.Now) < ExpiryWarning {
				expiring = append(expiring, fmt.Sprintf("%s (Secret %q) expires at %s", c.Name, c.Secret, c.NotAfter.UTC().Format(time.RFC3339)))
			}
		}
	}
	if len(expiring) > 0 {
		return conditionFalse(ReasonCertificateExpiring, strings.Join(expiring, "; ")+": renew it by updating the Secret in place (docs/tls.md, Rotation)"), true
	}
	return conditionTrue(ReasonCertificatesValid, "every certificate is valid for 7 days or more"), true
}

// secretChildren are the Secrets of the answer: those spec.TLS.auto
// renders, else the observed ones as last applied (a sync frozen before
// planning them, or a cluster whose spec no longer asks for them, must
// not have Metacontroller delete a CA its members still trust).
func (p *planner) secretChildren() []plan.Child {
	if cs := p.certs; cs != nil && cs.problem == "" {
		out := make([]plan.Child, 0, len(cs.secrets))
		rendered := map[string]bool{}
		for _, s := range cs.secrets {
			rendered[s.Name] = true
			out = append(out, plan.Child{Kind: plan.KindSecret, Name: s.Name, Object: s})
		}
		if cs.leaving {
			// Users' Secrets, as they are, until the move is over.
			for _, name := range sorted(keysOf(p.o.SecretChildren)) {
				if s := p.o.SecretChildren[name]; !rendered[name] {
					out = append(out, plan.Keep(plan.KindSecret, name, s.Annotations, func() any { return s }))
				}
			}
		}
		return out
	}
	auto := p.o.Cluster.AutoTLSSecrets()
	left := func(name string) bool {
		return p.leftAuto && (name == auto.CA || name == auto.Peer || name == auto.Server || name == auto.Operator)
	}
	if p.spec.Auth != nil && p.certs == nil && p.planned {
		// Password users' Secrets, and the cluster's other Secret children
		// (none without spec.TLS.auto) as they are.
		out := []plan.Child{}
		rendered := map[string]bool{}
		for _, s := range p.passwordSecrets() {
			rendered[s.Name] = true
			out = append(out, plan.Child{Kind: plan.KindSecret, Name: s.Name, Object: s})
		}
		for _, name := range sorted(keysOf(p.o.SecretChildren)) {
			if s := p.o.SecretChildren[name]; !rendered[name] && !left(name) && !strings.HasPrefix(name, UserSecretName(p.o.Cluster.Name, "")) {
				out = append(out, plan.Keep(plan.KindSecret, name, s.Annotations, func() any { return s }))
			}
		}
		return out
	}
	out := make([]plan.Child, 0, len(p.o.SecretChildren))
	for _, name := range sorted(keysOf(p.o.SecretChildren)) {
		if left(name) {
			continue
		}
		s := p.o.SecretChildren[name]
		out = append(out, plan.Keep(plan.KindSecret, name, s.Annotations, func() any { return s }))
	}
	return out
}

// wakeForCertificates asks for a sync when a certificate comes due
// before Metacontroller's periodic resync would come.
func (p *planner) wakeForCertificates(d *Decision) {
	if p.certs == nil || p.certs.wake.IsZero() {
		return
	}
	in := p.certs.wake.Sub(p.o.Now) + time.Second
	if in > 0 && in <= time.Minute && (d.ResyncAfter == 0 || in < d.ResyncAfter) {
		d.ResyncAfter = in
	}
}

// certificateStatus lists the certificates as rendered, and what is due.
func (p *planner) certificateStatus(cs *certificates, a *authority, lead time.Duration) {
	now := p.o.Now
	add := func(name, secret string, notAfter time.Time) {
		if a.static != nil {
			// The user's certificates, copied while members move between
			// spec.TLS.static and auto: the hook does not renew them.
			cs.status = append(cs.status, v1beta2.CertificateStatus{Name: name, Secret: secret, NotAfter: metav1.NewTime(notAfter)})
			return
		}
		renew := notAfter.Add(-lead)
		cs.status = append(cs.status, v1beta2.CertificateStatus{Name: name, Secret: secret, NotAfter: metav1.NewTime(notAfter), RenewAt: &metav1.Time{Time: renew}})
		if now.After(renew.Add(overdueAfter(lead))) {
			cs.overdue = append(cs.overdue, fmt.Sprintf("%s (Secret %q) was due for renewal at %s and expires at %s", name, secret, renew.Format(time.RFC3339), notAfter.Format(time.RFC3339)))
		}
		if renew.After(now) && (cs.wake.IsZero() || renew.Before(cs.wake)) {
			cs.wake = renew
		}
	}
	add("peer-ca", cs.names.CA, a.cur.peer.Cert.NotAfter)
	add("client-ca", cs.names.CA, a.cur.client.Cert.NotAfter)
	if a.old != nil && (cs.wake.IsZero() || a.old.notAfter().Before(cs.wake)) {
		cs.wake = a.old.notAfter()
	}
	for _, l := range cs.leaves {
		add(l.name, l.secret, l.notAfter)
	}
}

// overdueAfter is how long past its renewal a certificate may go before
// CertificatesReady says so: long enough for a CA rotation's restarts.
func overdueAfter(lead time.Duration) time.Duration { return min(10*time.Minute, lead/2) }

// certificatesCondition is CertificatesReady for spec.TLS.auto.
func (cs *certificates) condition() condition {
	switch {
	case cs.problem != "":
		return conditionFalse(cs.problem, cs.problemMessage)
	case len(cs.overdue) > 0:
		msg := "not renewed in time: " + strings.Join(cs.overdue, "; ")
		if cs.rotation != "" {
			msg += "; " + cs.rotation
		}
		return conditionFalse(ReasonRenewalOverdue, msg)
	case !cs.ready:
		return conditionFalse(ReasonCertificatesIssuing, "issuing the cluster's CAs and certificates (spec.TLS.auto)")
	case cs.rotation != "":
		return conditionTrue(ReasonRotatingCA, "every certificate is valid; "+cs.rotation)
	}
	return conditionTrue(ReasonCertificatesValid, "every certificate is valid and renewed before it expires")
}
