package etcdcluster

import (
	"crypto/rand"
	"encoding/base64"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/pki"
	"github.com/etcdhook/etcd-hook/plan"
)

// The credentials of spec.auth's users: one Secret child per user,
// <cluster>-user-<user>, kept stable like the certificates.
//   - With spec.TLS.auto: a client certificate with CN <user>, signed by
//     the client CA (tls.crt, tls.key, ca.crt), renewed and rotated with
//     the others (autotls.go). etcd takes the CN as the user.
//   - Otherwise: a generated password (password), made once, when the
//     Secret is absent. A client still needs a certificate the members'
//     CA signed to connect; the password says which user it is.

// Keys of a user's Secret.
const (
	UserPasswordKey = "password"
	UserCertKey     = "tls.crt"
	UserKeyKey      = "tls.key"
	UserCAKey       = "ca.crt"
)

// credentialUsers are the users whose Secret the answer holds: those
// spec.auth declares, and those the hook made that etcd still holds (they
// keep their credentials until they are deleted). Without a reading of
// etcd, the observed Secrets stay.
func (p *planner) credentialUsers() []string {
	var out []string
	if a := p.spec.Auth; a != nil {
		for _, u := range a.Users {
			out = append(out, u.Name)
		}
	}
	prefix := UserSecretName(p.o.Cluster.Name, "")
	for name := range p.o.SecretChildren {
		u, ok := strings.CutPrefix(name, prefix)
		if !ok || slices.Contains(out, u) {
			continue
		}
		if st := p.o.Auth; st == nil || (st.HasUser(u) && p.managedUser(u)) {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// userLeafSpecs are the certificate users' leaves, with spec.TLS.auto.
func (p *planner) userLeafSpecs() []leafSpec {
	var out []leafSpec
	for _, u := range p.credentialUsers() {
		out = append(out, leafSpec{
			name: "user:" + u, secret: UserSecretName(p.o.Cluster.Name, u),
			certKey: UserCertKey, keyKey: UserKeyKey, caKey: UserCAKey,
			req: pki.LeafRequest{CommonName: u, Usage: pki.Client},
		})
	}
	return out
}

// passwordSecrets are the password users' Secrets, without spec.TLS.auto:
// the observed one, or a new password when there is none.
func (p *planner) passwordSecrets() []*corev1.Secret {
	if p.spec.TLS.IsAuto() {
		return nil
	}
	var out []*corev1.Secret
	for _, u := range p.credentialUsers() {
		name := UserSecretName(p.o.Cluster.Name, u)
		if s, ok := p.o.SecretChildren[name]; ok && len(plan.SecretValue(s, UserPasswordKey)) > 0 {
			out = append(out, p.secretChild(name, s.Data))
			continue
		}
		out = append(out, p.secretChild(name, map[string][]byte{UserPasswordKey: []byte(newPassword())}))
	}
	return out
}

// newPassword is 192 random bits, URL-safe.
func newPassword() string {
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		// crypto/rand does not fail on Linux.
		panic("reading random bytes: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(buf)
}
