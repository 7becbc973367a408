package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/pemcert"
)

// ClientTLSFiles are the files a run calls members that serve TLS with:
// a client certificate, its key, and the CA the members' server
// certificates are checked against. In a run Pod they are the keys of a
// CoreOS client Secret (etcd-client.crt, etcd-client.key and
// etcd-client-ca.crt), mounted whole.
type ClientTLSFiles struct {
	Cert, Key, CA string
	// Secret names the Secret the files are mounted from, so that a
	// missing file is reported as the Secret or key it comes from: the
	// cluster's operatorSecret is mounted optionally (the hook cannot see
	// it before the run), and is then an empty directory when it is
	// missing. Empty when the agent runs by hand.
	Secret string
}

// IsZero reports whether no file is named: the run calls plain HTTP.
func (f ClientTLSFiles) IsZero() bool { return f.Cert == "" && f.Key == "" && f.CA == "" }

// LoadClientTLS reads and checks the files. Each error names the file it
// is about, since the alternative is a TLS handshake failing with an
// alert that names nothing.
func LoadClientTLS(f ClientTLSFiles, now time.Time) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, errors.New("a client certificate needs --cert, --key and --cacert together")
	}
	cert, err := f.read(f.Cert, "client certificate")
	if err != nil {
		return nil, err
	}
	key, err := f.read(f.Key, "client key")
	if err != nil {
		return nil, err
	}
	ca, err := f.read(f.CA, "CA")
	if err != nil {
		return nil, err
	}
	leaf, err := pemcert.First(cert)
	if err != nil {
		return nil, fmt.Errorf("the client certificate %s: %w", f.Cert, err)
	}
	if !hasPEMPrivateKey(key) {
		return nil, fmt.Errorf("the client key %s holds no PEM private key", f.Key)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the CA %s holds no PEM certificate", f.CA)
	}
	// An expired certificate is refused by the members with an alert that
	// does not say why; say it here.
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("the client certificate %s expired at %s", f.Cert, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg, err := etcdclient.ParseClientTLS(cert, key, ca)
	if err != nil {
		return nil, fmt.Errorf("the client certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	return cfg, nil
}

// read reads one file, naming the Secret and key it comes from when it is
// missing.
func (f ClientTLSFiles) read(path, what string) ([]byte, error) {
	data, err := os.ReadFile(path)
	switch {
	case err != nil && errors.Is(err, os.ErrNotExist) && f.Secret != "":
		return nil, fmt.Errorf("the %s %s is missing: the Secret %q, mounted at %s, is not there or has no key %q",
			what, path, f.Secret, filepath.Dir(path), filepath.Base(path))
	case err != nil:
		return nil, fmt.Errorf("the %s: %w", what, err)
	case len(data) == 0:
		return nil, fmt.Errorf("the %s %s is empty", what, path)
	}
	return data, nil
}

func hasPEMPrivateKey(data []byte) bool {
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return false
		}
		if strings.HasSuffix(block.Type, "PRIVATE KEY") {
			return true
		}
	}
}

// needsTLS is the first https endpoint when there is no client
// certificate: such a call would go out with the system's roots and no
// certificate, and fail with an alert that names nothing.
func needsTLS(endpoints []string, cfg *tls.Config) error {
	if cfg != nil {
		return nil
	}
	for _, ep := range endpoints {
		if u, err := url.Parse(ep); err == nil && u.Scheme == "https" {
			return fmt.Errorf("etcd endpoint %s serves TLS, and no client certificate was given (--cert, --key and --cacert; "+
				"in an EtcdBackup, spec.clientTLSSecret or the EtcdCluster's operatorSecret)", ep)
		}
	}
	return nil
}

// tlsProbeTimeout bounds the probe's dial and its wait for the member's
// first bytes.
const tlsProbeTimeout = 3 * time.Second

// explainTLS says why a member refuses TLS calls, or "". Through gRPC a
// member that refuses the client certificate, or whose server certificate
// is not trusted, only shows as calls that wait out their deadline
// (clientv3 reports "context deadline exceeded"): the handshake's own
// error is in gRPC's reconnect loop, out of reach. So, once no member
// answered, one TLS connection is made by hand to the first https
// endpoint, and what the handshake, or the member's first answer, says is
// the explanation. It never decides anything: it only names a cause.
func explainTLS(ctx context.Context, endpoints []string, cfg *tls.Config) string {
	if cfg == nil {
		return ""
	}
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" {
			continue
		}
		return probeTLS(ctx, u, cfg)
	}
	return ""
}

func probeTLS(ctx context.Context, u *url.URL, cfg *tls.Config) string {
	c := cfg.Clone()
	c.ServerName = u.Hostname()
	c.NextProtos = []string{"h2"}
	ctx, cancel := context.WithTimeout(ctx, tlsProbeTimeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: c}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &verify):
		return fmt.Sprintf("the server certificate of %s does not verify against the CA given (--cacert) and the endpoint's host name: %v", u.Host, err)
	case err != nil:
		return remoteRefusal(u.Host, err)
	}
	defer conn.Close()
	// With TLS 1.3 a member refuses a client certificate after the
	// client's side of the handshake is done: the refusal is the first
	// thing read. A member that accepts it sends its HTTP/2 settings.
	_ = conn.SetReadDeadline(time.Now().Add(tlsProbeTimeout))
	_, err = conn.Read(make([]byte, 1))
	return remoteRefusal(u.Host, err)
}

// remoteRefusal explains a TLS alert from the member; "" for anything
// else (a connection that cannot be made says nothing about TLS).
func remoteRefusal(host string, err error) string {
	var op *net.OpError
	if err == nil || !errors.As(err, &op) || op.Op != "remote error" {
		return ""
	}
	return fmt.Sprintf("%s refused the client certificate (%v): it must be signed by the CA the members trust (their server-ca.crt), for client authentication, and not expired", host, op.Err)
}
