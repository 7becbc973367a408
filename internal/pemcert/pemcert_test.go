package pemcert

import (
	"errors"
	"strings"
	"testing"

	"github.com/etcdhook/etcd-hook/internal/tlstest"
)

func TestFirst(t *testing.T) {
	ca, err := tlstest.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(tlstest.LeafOptions{CommonName: "leaf", Usage: tlstest.Client})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, data, wantCN, wantErr, reason string
	}{
		{"leaf", string(leaf.CertPEM), "leaf", "", "the plain case"},
		{"key first, then chain", string(leaf.KeyPEM) + string(leaf.CertPEM) + string(ca.PEM), "leaf", "", "a combined file: the first certificate is the leaf"},
		{"key only", string(leaf.KeyPEM), "", ErrNoCertificate.Error(), "a key where the certificate belongs"},
		{"not PEM", "hello", "", ErrNoCertificate.Error(), "garbage"},
		{"broken", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "", "does not parse", "a PEM block that is no certificate"},
	} {
		cert, err := First([]byte(tc.data))
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want %q: %s", tc.name, err, tc.wantErr, tc.reason)
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v: %s", tc.name, err, tc.reason)
		case tc.wantErr == "" && cert.Subject.CommonName != tc.wantCN:
			t.Errorf("%s: CN %q, want %q: %s", tc.name, cert.Subject.CommonName, tc.wantCN, tc.reason)
		}
		if tc.wantErr == ErrNoCertificate.Error() && !errors.Is(err, ErrNoCertificate) {
			t.Errorf("%s: %v is not ErrNoCertificate", tc.name, err)
		}
	}
}
