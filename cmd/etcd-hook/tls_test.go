package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// testCA is a CA made for one test, which signs the hook's certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool // trusts this CA only
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "etcd-hook test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// leaf issues a serving certificate for 127.0.0.1 with the given serial,
// which tells the client which certificate the hook served.
func (ca *testCA) leaf(t *testing.T, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "etcd-hook.etcd-hook.svc"},
		DNSNames:     []string{"etcd-hook.etcd-hook.svc", "etcd-hook.etcd-hook.svc.cluster.local"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// secretVolume is a directory laid out as the kubelet mounts a Secret:
// each key is a symlink through "..data" to a timestamped directory, and an
// update writes a new directory and swaps "..data" with one rename.
type secretVolume struct {
	dir     string
	version int
}

func newSecretVolume(t *testing.T, files map[string][]byte) *secretVolume {
	t.Helper()
	v := &secretVolume{dir: t.TempDir()}
	v.update(t, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *secretVolume) path(name string) string { return filepath.Join(v.dir, name) }

// update is the kubelet's atomic writer: the new keys appear all at once.
func (v *secretVolume) update(t *testing.T, files map[string][]byte) {
	t.Helper()
	v.version++
	ts := fmt.Sprintf("..2025_01_01_00_00_%02d.%d", v.version, v.version)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(v.dir, ts, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// rewrite writes the files in place, as a person or a hostPath would.
func (v *secretVolume) rewrite(t *testing.T, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		if err := os.WriteFile(v.path(name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// httpsClient opens a new connection, and so a new handshake, for every
// request, and offers HTTP/2 as Metacontroller's client does. Nil roots
// are the system's, which do not know the test's CA.
func httpsClient(roots *x509.CertPool) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			ForceAttemptHTTP2: true,
			TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		},
	}
}

// startHook runs serve until the test ends, and waits until it answers on
// its plain address (both are bound before either serves).
func startHook(t *testing.T, args ...string) (plainAddr string, stop func() error) {
	t.Helper()
	return startHookAt(t, freeAddr(t), args...)
}

// startHookAt is startHook on a plain address chosen by the caller.
func startHookAt(t *testing.T, plainAddr string, args ...string) (_ string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, append([]string{"--addr", plainAddr, "--shutdown-timeout", "2s", "--log-level", "error"}, args...))
	}()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			return errors.New("serve did not return within 5 s of its context ending")
		}
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})

	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("serve returned at start: %v", err)
		default:
		}
		resp, err := http.Get("http://" + plainAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			return plainAddr, stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("hook did not start: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// answer is what a request got, in the terms the tests compare.
type answer struct {
	Code        int
	Proto       string
	ContentType string
	JSON        bool
	Serial      int64 // of the certificate the hook served; 0 over plain HTTP
}

func get(t *testing.T, c *http.Client, method, url, body string) (answer, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{Code: resp.StatusCode, Proto: resp.Proto, ContentType: resp.Header.Get("Content-Type"), JSON: json.Valid(b)}
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		a.Serial = resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	return a, nil
}

// TestServeTLS runs the hook with a certificate mounted the way the kubelet
// mounts a Secret: the same router over HTTPS and plain HTTP, a client that
// does not trust the CA refused, rotations picked up on the next handshake
// without a restart, a broken rotation ignored, and both servers shut down.
func TestServeTLS(t *testing.T) {
	ca := newTestCA(t)
	certPEM, keyPEM := ca.leaf(t, 100)
	vol := newSecretVolume(t, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})})
	tlsAddr := freeAddr(t)
	plainAddr, stop := startHook(t, "--tls-addr", tlsAddr, "--tls-cert-file", vol.path("tls.crt"), "--tls-key-file", vol.path("tls.key"))

	fixture, err := os.ReadFile(testenv.Path(t, "test/fixtures/new-cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	trusting := httpsClient(ca.pool)
	requests := []struct {
		name              string
		client            *http.Client
		method, url, body string
		want              answer
	}{
		{name: "https healthz", client: trusting, method: "GET", url: "https://" + tlsAddr + "/healthz",
			want: answer{Code: 200, Proto: "HTTP/2.0", ContentType: "text/plain; charset=utf-8", Serial: 100}},
		{name: "https sync", client: trusting, method: "POST", url: "https://" + tlsAddr + "/sync", body: string(fixture),
			want: answer{Code: 200, Proto: "HTTP/2.0", ContentType: "application/json", JSON: true, Serial: 100}},
		{name: "plain healthz", client: http.DefaultClient, method: "GET", url: "http://" + plainAddr + "/healthz",
			want: answer{Code: 200, Proto: "HTTP/1.1", ContentType: "text/plain; charset=utf-8"}},
		{name: "plain sync", client: http.DefaultClient, method: "POST", url: "http://" + plainAddr + "/sync", body: string(fixture),
			want: answer{Code: 200, Proto: "HTTP/1.1", ContentType: "application/json", JSON: true}},
	}
	for _, tt := range requests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := get(t, tt.client, tt.method, tt.url, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", tt.method, tt.url, diff)
			}
		})
	}

	t.Run("untrusted client", func(t *testing.T) {
		_, err := get(t, httpsClient(nil), "GET", "https://"+tlsAddr+"/healthz", "")
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Fatalf("a client that does not trust the CA got %v, want a certificate verification error", err)
		}
	})

	// Each step builds on the ones before: the serial is the certificate
	// the next handshake is served.
	otherCert, _ := ca.leaf(t, 300)
	_, otherKey := ca.leaf(t, 301)
	rotations := []struct {
		name       string
		rotate     func(t *testing.T)
		wantSerial int64
	}{
		{name: "kubelet swap", rotate: func(t *testing.T) {
			c, k := ca.leaf(t, 200)
			vol.update(t, map[string][]byte{"tls.crt": c, "tls.key": k})
		}, wantSerial: 200},
		{name: "mismatched pair keeps the old one", rotate: func(t *testing.T) {
			vol.update(t, map[string][]byte{"tls.crt": otherCert, "tls.key": otherKey})
		}, wantSerial: 200},
		{name: "fixed after a broken one", rotate: func(t *testing.T) {
			c, k := ca.leaf(t, 400)
			vol.update(t, map[string][]byte{"tls.crt": c, "tls.key": k})
		}, wantSerial: 400},
		{name: "not PEM keeps the old one", rotate: func(t *testing.T) {
			vol.rewrite(t, map[string][]byte{"tls.crt": []byte("not a certificate\n")})
		}, wantSerial: 400},
		{name: "rewritten in place", rotate: func(t *testing.T) {
			c, k := ca.leaf(t, 500)
			vol.rewrite(t, map[string][]byte{"tls.crt": c, "tls.key": k})
		}, wantSerial: 500},
	}
	for _, tt := range rotations {
		t.Run("rotation/"+tt.name, func(t *testing.T) {
			tt.rotate(t)
			got, err := get(t, trusting, "GET", "https://"+tlsAddr+"/healthz", "")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantSerial, got.Serial); diff != "" {
				t.Errorf("serial of the served certificate (-want +got):\n%s", diff)
			}
		})
	}

	if err := stop(); err != nil {
		t.Fatalf("serve returned %v on shutdown, want nil", err)
	}
	for _, addr := range []string{plainAddr, tlsAddr} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after shutdown", addr)
		}
	}
}

// TestServeTLSRefusesToStart: without a certificate that loads, or with an
// address taken, the hook does not start, says why, and leaves no port
// bound.
func TestServeTLSRefusesToStart(t *testing.T) {
	ca := newTestCA(t)
	certPEM, keyPEM := ca.leaf(t, 1)
	_, otherKey := ca.leaf(t, 2)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert, key := write("tls.crt", certPEM), write("tls.key", keyPEM)
	garbage, other := write("garbage.crt", []byte("-----BEGIN NOTHING-----\n")), write("other.key", otherKey)
	missing := filepath.Join(dir, "missing.crt")

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	tests := []struct {
		name         string
		cert, key    string
		tlsAddr      string
		wantMentions []string
	}{
		{name: "missing certificate", cert: missing, key: key, wantMentions: []string{missing, "no such file"}},
		{name: "missing key", cert: cert, key: filepath.Join(dir, "missing.key"), wantMentions: []string{"missing.key", "no such file"}},
		{name: "not a certificate", cert: garbage, key: key, wantMentions: []string{garbage, key}},
		{name: "key of another certificate", cert: cert, key: other, wantMentions: []string{cert, other, "does not match"}},
		{name: "https address taken", cert: cert, key: key, tlsAddr: taken.Addr().String(), wantMentions: []string{"listen for https on " + taken.Addr().String()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plainAddr, tlsAddr := freeAddr(t), tt.tlsAddr
			if tlsAddr == "" {
				tlsAddr = freeAddr(t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := serve(ctx, []string{"--addr", plainAddr, "--tls-addr", tlsAddr, "--tls-cert-file", tt.cert, "--tls-key-file", tt.key, "--log-level", "error"})
			if err == nil {
				t.Fatal("serve started; want an error")
			}
			for _, m := range tt.wantMentions {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
			// The plain address is free again: nothing was left bound.
			l, err := net.Listen("tcp", plainAddr)
			if err != nil {
				t.Errorf("the plain address is still bound after a failed start: %v", err)
			} else {
				l.Close()
			}
		})
	}
}

// TestTLSFlags: the certificate and key go together, HTTPS has an address
// of its own, and without them nothing about TLS is set.
func TestTLSFlags(t *testing.T) {
	type tlsFlags struct{ Addr, TLSAddr, Cert, Key string }
	tests := []struct {
		name    string
		args    []string
		want    tlsFlags
		wantErr string
	}{
		{name: "defaults: plain HTTP only", args: nil,
			want: tlsFlags{Addr: ":8080", TLSAddr: ":8443"}},
		{name: "both files", args: []string{"--tls-cert-file", "/etc/etcd-hook/tls/tls.crt", "--tls-key-file", "/etc/etcd-hook/tls/tls.key"},
			want: tlsFlags{Addr: ":8080", TLSAddr: ":8443", Cert: "/etc/etcd-hook/tls/tls.crt", Key: "/etc/etcd-hook/tls/tls.key"}},
		{name: "own https address", args: []string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-addr", "127.0.0.1:9443"},
			want: tlsFlags{Addr: ":8080", TLSAddr: "127.0.0.1:9443", Cert: "c", Key: "k"}},
		{name: "certificate alone", args: []string{"--tls-cert-file", "c"},
			wantErr: "--tls-cert-file and --tls-key-file are set together or not at all"},
		{name: "key alone", args: []string{"--tls-key-file", "k"},
			wantErr: "--tls-cert-file and --tls-key-file are set together or not at all"},
		{name: "https on the plain address", args: []string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-addr", ":8080"},
			wantErr: `--tls-addr ":8080" is also --addr: HTTPS needs an address of its own`},
		{name: "empty https address", args: []string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-addr", ""},
			wantErr: "--tls-addr is empty: HTTPS needs an address of its own"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := tlsFlags{Addr: cfg.addr, TLSAddr: cfg.tlsAddr, Cert: cfg.tlsCertFile, Key: cfg.tlsKeyFile}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
		})
	}
}
