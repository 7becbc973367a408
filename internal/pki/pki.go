package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Backdate is how far before the moment of issue a certificate becomes
// valid, so that a member whose clock is a little behind the hook's
// accepts it at once.
const Backdate = time.Minute

// KeyPair is a certificate, and its private key when it is known (a CA
// kept only for trust has none).
type KeyPair struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	signer  crypto.Signer
	// fingerprint is Fingerprint, worked out once.
	fingerprint string
}

// CertOnly is the pair without its key: a CA kept for trust only.
func (k *KeyPair) CertOnly() *KeyPair {
	return &KeyPair{Cert: k.Cert, CertPEM: k.CertPEM, fingerprint: k.fingerprint}
}

// CanSign reports whether the pair holds its private key.
func (k *KeyPair) CanSign() bool { return k != nil && k.signer != nil }

// Fingerprint is the SHA-256 of the certificate, hex, first 16 bytes: what
// a Pod annotation records of the CA it trusts.
func (k *KeyPair) Fingerprint() string {
	if k.fingerprint != "" {
		return k.fingerprint
	}
	return fingerprintOf(k.Cert)
}

func fingerprintOf(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:16])
}

// NewCA makes a self-signed CA valid from now (less Backdate) to notAfter.
func NewCA(commonName string, now, notAfter time.Time) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making the key of CA %q: %w", commonName, err)
	}
	tmpl, err := template(commonName, now, notAfter)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.MaxPathLenZero = true, true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	return sign(tmpl, tmpl, key, key)
}

// Usage is what a leaf may be used for.
type Usage int

const (
	// Server: it serves TLS.
	Server Usage = 1 << iota
	// Client: it calls with TLS.
	Client
)

// LeafRequest is a leaf to issue.
type LeafRequest struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	Usage      Usage
	// NotAfter is when it expires; Issue cuts it to the CA's own expiry.
	NotAfter time.Time
}

// Issue signs a new leaf with the CA, valid from now (less Backdate).
func (ca *KeyPair) Issue(req LeafRequest, now time.Time) (*KeyPair, error) {
	if !ca.CanSign() {
		return nil, errors.New("the CA's private key is not known")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making the key of %q: %w", req.CommonName, err)
	}
	notAfter := req.NotAfter
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl, err := template(req.CommonName, now, notAfter)
	if err != nil {
		return nil, err
	}
	tmpl.DNSNames, tmpl.IPAddresses = req.DNSNames, req.IPs
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if req.Usage&Server != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Usage&Client != 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	return sign(tmpl, ca.Cert, key, ca.signer)
}

func template(commonName string, now, notAfter time.Time) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("drawing a serial number: %w", err)
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-Backdate).UTC().Truncate(time.Second),
		NotAfter:     notAfter.UTC().Truncate(time.Second),
	}, nil
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey crypto.Signer) (*KeyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, fmt.Errorf("signing %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("reading back %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the key of %q: %w", tmpl.Subject.CommonName, err)
	}
	return &KeyPair{
		Cert:        cert,
		CertPEM:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:      pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		signer:      key,
		fingerprint: fingerprintOf(cert),
	}, nil
}

// Parse reads a pair back: the first certificate of certPEM, and keyPEM
// if given, which must be that certificate's key.
func Parse(certPEM, keyPEM []byte) (*KeyPair, error) {
	var block *pem.Block
	for rest := certPEM; ; {
		if block, rest = pem.Decode(rest); block == nil || block.Type == "CERTIFICATE" {
			break
		}
	}
	if block == nil {
		return nil, errors.New("holds no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the certificate does not parse: %w", err)
	}
	k := &KeyPair{Cert: cert, CertPEM: pem.EncodeToMemory(block), fingerprint: fingerprintOf(cert)}
	if len(keyPEM) == 0 {
		return k, nil
	}
	pair, err := tls.X509KeyPair(k.CertPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the key is not the certificate's: %w", err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("the key cannot sign")
	}
	k.KeyPEM, k.signer = keyPEM, signer
	return k, nil
}

// ParseTrust reads every certificate of one or more PEM bundles into one
// trust-only pair: Cert is the first certificate and names the pair
// (Fingerprint), CertPEM holds them all, once each, in order. It is how a
// bundle someone else issued (a user's CA file, with several CAs in it)
// is trusted as a whole.
func ParseTrust(bundles ...[]byte) (*KeyPair, error) {
	var k *KeyPair
	seen := map[string]bool{}
	for _, rest := range bundles {
		for {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			if block.Type != "CERTIFICATE" {
				continue
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("a certificate does not parse: %w", err)
			}
			fp := fingerprintOf(cert)
			if seen[fp] {
				continue
			}
			seen[fp] = true
			if k == nil {
				k = &KeyPair{Cert: cert, fingerprint: fp}
			}
			k.CertPEM = append(k.CertPEM, pem.EncodeToMemory(block)...)
		}
	}
	if k == nil {
		return nil, errors.New("holds no PEM certificate")
	}
	return k, nil
}

// IssuedBy reports whether ca signed the certificate.
func IssuedBy(cert *x509.Certificate, ca *KeyPair) bool {
	return ca != nil && bytes.Equal(cert.RawIssuer, ca.Cert.RawSubject) && cert.CheckSignatureFrom(ca.Cert) == nil
}

// Bundle concatenates the CAs' certificates, skipping nil ones: a trust
// bundle file.
func Bundle(cas ...*KeyPair) []byte {
	var out []byte
	for _, ca := range cas {
		if ca != nil {
			out = append(out, ca.CertPEM...)
		}
	}
	return out
}
