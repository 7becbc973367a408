package plan

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/pemcert"
)

// SecretKeys are the keys of one TLS Secret: a leaf, its key, and the CA
// the other side is checked against.
type SecretKeys struct {
	// Field is the spec field that names the Secret, for messages.
	Field         string
	Cert, Key, CA string
}

// OperatorKeys are the keys of the operatorSecret's shape: a client
// certificate the hook and backups call members with.
var OperatorKeys = SecretKeys{"spec.TLS.static.operatorSecret", v1beta2.ClientCertKey, v1beta2.ClientKeyKey, v1beta2.ClientCAKey}

// CheckClientSecret checks a Secret with a client certificate in the
// operatorSecret's shape (etcd-client.crt, etcd-client.key,
// etcd-client-ca.crt), as an EtcdBackup's clientTLSSecret is: "" when it
// is usable, else what is wrong, naming the key.
func CheckClientSecret(secret *corev1.Secret, now time.Time) string {
	return CheckTLSSecret(secret, OperatorKeys, nil, now)
}

// SecretValue is the Secret's value under key, from data or stringData.
func SecretValue(s *corev1.Secret, key string) []byte {
	if v, ok := s.Data[key]; ok {
		return v
	}
	if v, ok := s.StringData[key]; ok {
		return []byte(v)
	}
	return nil
}

// secretChecks remembers what checkTLSSecret said of a Secret's version,
// so that a steady sync parses no certificate: a Secret with a UID and a
// resourceVersion (as every one from the API server has) changes only with
// a new resourceVersion. One entry per Secret and use, whose new version
// replaces the old, so the memo grows with the Secrets, not with their
// versions: 3 per TLS cluster, a few hundred bytes each. The bound only
// stops a runaway.
var secretChecks = newCheckMemo(1 << 16)

type checkMemo struct {
	max int
	mu  sync.Mutex
	m   map[string]checkResult
}

// checkResult is a check's verdict up to notAfter, the leaf's expiry.
type checkResult struct {
	resourceVersion string
	msg             string
	notAfter        time.Time
}

func newCheckMemo(max int) *checkMemo { return &checkMemo{max: max, m: map[string]checkResult{}} }

// CheckTLSSecret checks a TLS Secret before a member mounts it or the hook
// calls with it: "" when it is usable, else what is wrong, naming the key.
// hostsToServe are names the leaf must carry. The verdict on a Secret's
// version is remembered (see secretChecks).
func CheckTLSSecret(secret *corev1.Secret, keys SecretKeys, hostsToServe []string, now time.Time) string {
	msg, _ := CheckTLSSecretExpiry(secret, keys, hostsToServe, now)
	return msg
}

// CheckTLSSecretExpiry is CheckTLSSecret, and the leaf's expiry when the
// Secret is usable.
func CheckTLSSecretExpiry(secret *corev1.Secret, keys SecretKeys, hostsToServe []string, now time.Time) (string, time.Time) {
	if secret.UID == "" || secret.ResourceVersion == "" {
		return checkTLSSecret(secret, keys, hostsToServe, now)
	}
	key := strings.Join(append([]string{string(secret.UID), keys.Cert, keys.Key, keys.CA}, hostsToServe...), "\x00")
	secretChecks.mu.Lock()
	r, ok := secretChecks.m[key]
	secretChecks.mu.Unlock()
	if ok && r.resourceVersion == secret.ResourceVersion && (r.msg != "" || now.IsZero() || !now.After(r.notAfter)) {
		return r.msg, r.notAfter
	}
	msg, notAfter := checkTLSSecret(secret, keys, hostsToServe, now)
	secretChecks.mu.Lock()
	if len(secretChecks.m) >= secretChecks.max {
		// Forget everything rather than track recency: a full memo means
		// tens of thousands of Secrets, and each is parsed again once.
		clear(secretChecks.m)
	}
	secretChecks.m[key] = checkResult{resourceVersion: secret.ResourceVersion, msg: msg, notAfter: notAfter}
	secretChecks.mu.Unlock()
	return msg, notAfter
}

// checkTLSSecret returns what is wrong with the Secret, and the leaf's
// expiry when nothing is.
func checkTLSSecret(secret *corev1.Secret, s SecretKeys, hostsToServe []string, now time.Time) (string, time.Time) {
	var missing []string
	for _, key := range []string{s.Cert, s.Key, s.CA} {
		if len(SecretValue(secret, key)) == 0 {
			missing = append(missing, fmt.Sprintf("%q", key))
		}
	}
	if len(missing) > 0 {
		return "lacks key " + strings.Join(missing, ", "), time.Time{}
	}
	cert, key, ca := SecretValue(secret, s.Cert), SecretValue(secret, s.Key), SecretValue(secret, s.CA)
	leaf, err := pemcert.First(cert)
	if err != nil {
		return fmt.Sprintf("key %q: %v", s.Cert, err), time.Time{}
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		return fmt.Sprintf("key %q does not hold the private key of %q: %v", s.Key, s.Cert, err), time.Time{}
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return fmt.Sprintf("key %q holds no PEM certificate", s.CA), time.Time{}
	}
	if !now.IsZero() && now.After(leaf.NotAfter) {
		return fmt.Sprintf("key %q: the certificate expired at %s", s.Cert, leaf.NotAfter.UTC().Format(time.RFC3339)), time.Time{}
	}
	for _, host := range hostsToServe {
		if err := leaf.VerifyHostname(host); err != nil {
			return fmt.Sprintf("key %q: the certificate does not name the members (%v); it needs %s", s.Cert, err, wildcardOf(host)), time.Time{}
		}
	}
	return "", leaf.NotAfter
}

func wildcardOf(host string) string {
	_, rest, _ := strings.Cut(host, ".")
	return "*." + rest
}
