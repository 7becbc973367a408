package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that signs leaves.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, as a Secret's *-ca.crt key holds it.
	PEM []byte
}

// Leaf is an issued certificate and its key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
	Serial          *big.Int
}

// KeyPair parses the leaf for a tls.Config.
func (l Leaf) KeyPair() (tls.Certificate, error) { return tls.X509KeyPair(l.CertPEM, l.KeyPEM) }

// Usage is what a leaf may be used for.
type Usage int

const (
	// Server leaves authenticate a listener.
	Server Usage = 1 << iota
	// Client leaves authenticate a caller.
	Client
)

// LeafOptions describe one leaf.
type LeafOptions struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	Usage      Usage
	// Lifetime defaults to a day.
	Lifetime time.Duration
}

// NewCA makes a self-signed CA valid for a day.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue signs a leaf.
func (ca *CA) Issue(opts LeafOptions) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, fmt.Errorf("leaf key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return Leaf{}, err
	}
	lifetime := opts.Lifetime
	if lifetime == 0 {
		lifetime = 24 * time.Hour
	}
	var usages []x509.ExtKeyUsage
	if opts.Usage&Server != 0 {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	if opts.Usage&Client != 0 {
		usages = append(usages, x509.ExtKeyUsageClientAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: opts.CommonName},
		DNSNames:     opts.DNSNames,
		IPAddresses:  opts.IPs,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Leaf{}, fmt.Errorf("leaf certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Leaf{}, fmt.Errorf("leaf key: %w", err)
	}
	return Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		Serial:  serial,
	}, nil
}

// ClientPair issues a client leaf for commonName and parses it for a
// tls.Config: an application's certificate, or etcd's user of that name
// where etcd authenticates by certificate.
func (ca *CA) ClientPair(commonName string) (tls.Certificate, error) {
	leaf, err := ca.Issue(LeafOptions{CommonName: commonName, Usage: Client})
	if err != nil {
		return tls.Certificate{}, err
	}
	return leaf.KeyPair()
}

// ClientConfig is a client's TLS configuration that trusts the CA alone
// and presents certs (none: a client without a certificate).
func (ca *CA) ClientConfig(certs ...tls.Certificate) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12}
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	return serial, nil
}

// ClusterNames are the DNS names of an EtcdCluster's members and Services,
// with and without the cluster domain: what docs/tls.md tells users to put
// into their certificates.
func ClusterNames(cluster, namespace, domain string) (peer, server []string) {
	suffixes := []string{".svc"}
	if domain != "" {
		suffixes = append(suffixes, ".svc."+domain)
	}
	for _, s := range suffixes {
		peer = append(peer, "*."+cluster+"."+namespace+s)
		server = append(server, "*."+cluster+"."+namespace+s, cluster+"-client."+namespace+s)
	}
	server = append(server, cluster+"-client", "localhost")
	return peer, server
}

// ClusterSecrets are the data of the three Secrets of the CoreOS TLS
// policy, by Secret: the peer Secret (peer.crt, peer.key, peer-ca.crt),
// the server Secret (server.crt, ...) and the operator's client Secret
// (etcd-client.crt, ...).
type ClusterSecrets struct {
	Peer, Server, Client map[string][]byte
}

// IssueCluster issues the leaves of one EtcdCluster. Peer and server
// leaves serve and call (a member dials its peers, and etcd's gRPC gateway
// dials its own client port with the server leaf), so they carry both
// usages. Both also name 127.0.0.1: the gateway dials from it, and so does
// every Pod of the e2e harness (they share the host's loopback, where
// Kubernetes would show each Pod's own IP). etcd checks a caller's leaf
// against the caller's address: an IP SAN first, else the reverse lookup
// of the address against the DNS SANs, which is what a member's peers pass
// by in Kubernetes (the harness's DNS answers those lookups too).
func (ca *CA) IssueCluster(cluster, namespace, domain string) (ClusterSecrets, error) {
	peerNames, serverNames := ClusterNames(cluster, namespace, domain)
	loopback := []net.IP{net.IPv4(127, 0, 0, 1)}
	peer, err := ca.Issue(LeafOptions{CommonName: cluster + " peer", DNSNames: peerNames, IPs: loopback, Usage: Server | Client})
	if err != nil {
		return ClusterSecrets{}, err
	}
	server, err := ca.Issue(LeafOptions{CommonName: cluster + " server", DNSNames: serverNames, IPs: loopback, Usage: Server | Client})
	if err != nil {
		return ClusterSecrets{}, err
	}
	client, err := ca.Issue(LeafOptions{CommonName: "etcd-hook", Usage: Client})
	if err != nil {
		return ClusterSecrets{}, err
	}
	return ClusterSecrets{
		Peer:   map[string][]byte{"peer.crt": peer.CertPEM, "peer.key": peer.KeyPEM, "peer-ca.crt": ca.PEM},
		Server: map[string][]byte{"server.crt": server.CertPEM, "server.key": server.KeyPEM, "server-ca.crt": ca.PEM},
		Client: map[string][]byte{"etcd-client.crt": client.CertPEM, "etcd-client.key": client.KeyPEM, "etcd-client-ca.crt": ca.PEM},
	}, nil
}

// WriteFiles writes a Secret's data into dir, one file per key, as the
// kubelet mounts it (without its symlink layout).
func WriteFiles(dir string, data map[string][]byte) error {
	for key, value := range data {
		if err := os.WriteFile(filepath.Join(dir, key), value, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", key, err)
		}
	}
	return nil
}

// CheckServing checks a serving certificate as a client that trusts caPEM
// alone would: certPEM and keyPEM are a pair, and the certificate verifies
// for host. It returns the certificate.
func CheckServing(caPEM, certPEM, keyPEM []byte, host string) (*x509.Certificate, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("ca.crt holds no certificate")
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.crt and tls.key: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
		return leaf, fmt.Errorf("the certificate does not verify for %s against ca.crt: %w", host, err)
	}
	return leaf, nil
}
