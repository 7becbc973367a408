package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// certReloader serves the hook's TLS key pair from files that change under
// the running process, so that a certificate can be rotated without a
// restart (and without a window in which Metacontroller's syncs fail).
//
// In a cluster the files are a mounted Secret, which the kubelet updates in
// place: it writes the new keys into a fresh directory and swaps the
// "..data" symlink to it, so each file opened is wholly old or wholly new.
// That only works without subPath, which pins the old file for good.
//
// The pair is re-read on every handshake and parsed again only when the
// bytes differ from the last ones seen. Comparing content rather than
// modification times catches a rewrite in place that keeps size and mtime
// (mtimes are coarse on some filesystems), and reading two small files is
// cheap next to the handshake itself; Metacontroller keeps its connections
// open, so handshakes are rare.
//
// A new pair that does not load (a key that does not match the
// certificate, a file half written, or the moment of a swap between reading
// the certificate and the key) is logged once and the last good pair keeps
// serving: a bad rotation must not take the hook down. Only the first load,
// at start, is fatal.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu sync.Mutex
	// cert is the last pair that loaded, which handshakes are served.
	cert *tls.Certificate
	// certPEM and keyPEM are the bytes last read, whether they loaded or
	// not: a broken pair is reported once, not on every handshake.
	certPEM, keyPEM []byte
}

// newCertReloader loads the pair once; an error names the files, and the
// hook does not start without a certificate.
func newCertReloader(certFile, keyFile string, logger *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger}
	certPEM, keyPEM, err := r.read()
	if err != nil {
		return nil, err
	}
	cert, err := r.parse(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	r.cert, r.certPEM, r.keyPEM = cert, certPEM, keyPEM
	r.logLoaded("TLS certificate loaded")
	return r, nil
}

// serverConfig is the TLS configuration the hook serves HTTPS with.
func (r *certReloader) serverConfig() *tls.Config {
	return &tls.Config{
		// Metacontroller is a Go client: TLS 1.2 is the oldest it needs.
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.getCertificate,
	}
}

// getCertificate is tls.Config.GetCertificate: the current pair, re-read
// when the files changed.
func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reload()
	return r.cert, nil
}

// reload replaces the pair when the files hold new bytes that load; r.mu
// is held.
func (r *certReloader) reload() {
	certPEM, keyPEM, err := r.read()
	if err != nil {
		// Unchanged bytes are not re-reported: a file that vanished stays
		// vanished between handshakes, and one warning is enough.
		if r.certPEM != nil || r.keyPEM != nil {
			r.logger.Warn("keeping the previous TLS certificate: the files cannot be read", "error", err.Error())
			r.certPEM, r.keyPEM = nil, nil
		}
		return
	}
	if bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return
	}
	r.certPEM, r.keyPEM = certPEM, keyPEM
	cert, err := r.parse(certPEM, keyPEM)
	if err != nil {
		r.logger.Warn("keeping the previous TLS certificate: the new files do not load (retried when they change again)", "error", err.Error())
		return
	}
	r.cert = cert
	r.logLoaded("TLS certificate reloaded")
}

func (r *certReloader) read() (certPEM, keyPEM []byte, err error) {
	certPEM, err = os.ReadFile(r.certFile)
	if err != nil {
		return nil, nil, fmt.Errorf("TLS certificate: %w", err)
	}
	keyPEM, err = os.ReadFile(r.keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("TLS key: %w", err)
	}
	return certPEM, keyPEM, nil
}

func (r *certReloader) parse(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// X509KeyPair's errors name neither file.
		return nil, fmt.Errorf("TLS key pair %s and %s: %w", r.certFile, r.keyFile, err)
	}
	return &cert, nil
}

// logLoaded says which certificate is served, so that a rotation can be
// confirmed from the logs.
func (r *certReloader) logLoaded(msg string) {
	attrs := []any{"cert", r.certFile}
	if leaf := r.cert.Leaf; leaf != nil {
		attrs = append(attrs, "serial", leaf.SerialNumber.String(), "dnsNames", leaf.DNSNames, "notAfter", leaf.NotAfter)
	}
	r.logger.Info(msg, attrs...)
}
