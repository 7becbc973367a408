package pki

import (
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var now = time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)

func mustCA(t *testing.T, name string, life time.Duration) *KeyPair {
	t.Helper()
	ca, err := NewCA(name, now, now.Add(life))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestIssueVerifies(t *testing.T) {
	ca := mustCA(t, "ca", 2*time.Hour)
	other := mustCA(t, "ca", 2*time.Hour)
	leaf, err := ca.Issue(LeafRequest{CommonName: "server", DNSNames: []string{"*.c.ns.svc"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: Server | Client, NotAfter: now.Add(time.Hour)}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, reason string
		roots        []*KeyPair
		usage        x509.ExtKeyUsage
		host         string
		wantErr      bool
	}{
		{"own CA, as a server", "the plain case", []*KeyPair{ca}, x509.ExtKeyUsageServerAuth, "m-1.c.ns.svc", false},
		{"own CA, as a client", "members call each other with their leaf", []*KeyPair{ca}, x509.ExtKeyUsageClientAuth, "", false},
		{"a bundle of old and new", "a rotation trusts both CAs, which share a name", []*KeyPair{other, ca}, x509.ExtKeyUsageServerAuth, "127.0.0.1", false},
		{"another CA of the same name", "the name is not the key", []*KeyPair{other}, x509.ExtKeyUsageServerAuth, "", true},
		{"a name it does not carry", "", []*KeyPair{ca}, x509.ExtKeyUsageServerAuth, "m-1.other.ns.svc", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(Bundle(tc.roots...)) {
				t.Fatal("bundle holds no certificate")
			}
			_, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}, CurrentTime: now.Add(time.Minute)})
			if (err != nil) != tc.wantErr {
				t.Errorf("%s: Verify() = %v, want error %v", tc.reason, err, tc.wantErr)
			}
		})
	}
	if !IssuedBy(leaf.Cert, ca) || IssuedBy(leaf.Cert, other) {
		t.Errorf("IssuedBy: own CA %v, other CA of the same name %v; want true, false", IssuedBy(leaf.Cert, ca), IssuedBy(leaf.Cert, other))
	}
}

func TestIssueIsCutToTheCA(t *testing.T) {
	ca := mustCA(t, "ca", time.Hour)
	leaf, err := ca.Issue(LeafRequest{CommonName: "x", Usage: Client, NotAfter: now.Add(5 * time.Hour)}, now)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("a leaf asked to outlive its CA: NotAfter %s, want the CA's %s (no chain verifies past it)", leaf.Cert.NotAfter, ca.Cert.NotAfter)
	}
	if want := now.Add(-Backdate); !leaf.Cert.NotBefore.Equal(want) {
		t.Errorf("NotBefore %s, want %s (backdated for clock skew)", leaf.Cert.NotBefore, want)
	}
}

func TestParse(t *testing.T) {
	ca := mustCA(t, "ca", time.Hour)
	other := mustCA(t, "other", time.Hour)
	for _, tc := range []struct {
		name, reason string
		cert, key    []byte
		wantErr      string
		wantCanSign  bool
		wantSameAsCA bool
	}{
		{"certificate and key", "a CA read back from its Secret signs again", ca.CertPEM, ca.KeyPEM, "", true, true},
		{"certificate alone", "a CA kept for trust only", ca.CertPEM, nil, "", false, true},
		{"a bundle", "the first certificate is the one", append(append([]byte{}, ca.CertPEM...), other.CertPEM...), nil, "", false, true},
		{"another's key", "", ca.CertPEM, other.KeyPEM, "the key is not the certificate's", false, false},
		{"not PEM", "", []byte("hello"), nil, "holds no PEM certificate", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.cert, tc.key)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s: Parse() error = %v, want %q", tc.reason, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: Parse(): %v", tc.reason, err)
			}
			if diff := cmp.Diff([]any{tc.wantCanSign, tc.wantSameAsCA}, []any{got.CanSign(), got.Fingerprint() == ca.Fingerprint()}); diff != "" {
				t.Errorf("%s: CanSign, same certificate (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
	if _, err := (&KeyPair{Cert: ca.Cert}).Issue(LeafRequest{CommonName: "x"}, now); err == nil {
		t.Error("a CA without its key issued a leaf")
	}
}

func TestParseTrust(t *testing.T) {
	a, b, c := mustCA(t, "a", time.Hour), mustCA(t, "b", time.Hour), mustCA(t, "c", time.Hour)
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name, reason string
		bundles      [][]byte
		want         []byte
		wantErr      string
	}{
		{"one CA", "a CA file of one certificate", [][]byte{a.CertPEM}, a.CertPEM, ""},
		{"two files, one shared", "a CA in both files is trusted once, in the order first seen",
			[][]byte{cat(a.CertPEM, b.CertPEM), cat(b.CertPEM, c.CertPEM)}, cat(a.CertPEM, b.CertPEM, c.CertPEM), ""},
		{"a key between", "blocks other than certificates are skipped", [][]byte{cat(a.KeyPEM, b.CertPEM)}, b.CertPEM, ""},
		{"nothing", "", [][]byte{nil, []byte("hello")}, nil, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTrust(tc.bundles...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseTrust() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: ParseTrust(): %v", tc.reason, err)
			}
			if diff := cmp.Diff(string(tc.want), string(got.CertPEM)); diff != "" {
				t.Errorf("%s: CertPEM (-want +got):\n%s", tc.reason, diff)
			}
			if got.CanSign() {
				t.Errorf("%s: a trusted bundle can sign", tc.reason)
			}
		})
	}
}
