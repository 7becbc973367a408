package etcdclient_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
)

// startTLSCluster starts members that serve clients TLS with client
// certificate auth, and returns the CA that signed their certificates.
func startTLSCluster(t *testing.T, version string, size int) (*etcdtest.Cluster, *tlstest.CA) {
	t.Helper()
	return etcdtest.StartTLSCluster(t, etcdtest.Options{Size: size, Version: version})
}

func clientTLS(t *testing.T, id string, signer, trusted *tlstest.CA) *etcdclient.ClientTLS {
	t.Helper()
	leaf, err := signer.Issue(tlstest.LeafOptions{CommonName: "etcd-hook", Usage: tlstest.Client})
	if err != nil {
		t.Fatal(err)
	}
	return &etcdclient.ClientTLS{ID: id, Cert: leaf.CertPEM, Key: leaf.KeyPEM, CA: trusted.PEM}
}

func TestTLSMembersAnswerOnlyTheOperatorCertificate(t *testing.T) {
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			ec, ca := startTLSCluster(t, version, 3)
			other, err := tlstest.NewCA("another ca")
			if err != nil {
				t.Fatal(err)
			}
			pool := etcdclient.NewPool(0)
			t.Cleanup(pool.Close)
			ctx := context.Background()

			for _, tc := range []struct {
				name       string
				creds      *etcdclient.ClientTLS
				wantNoConn bool // Cluster itself refuses
				reachable  int
				reason     string
			}{
				{"operator certificate", clientTLS(t, "good", ca, ca), false, 3, "the members' CA signed it, and the client trusts their CA"},
				{"certificate of another CA", clientTLS(t, "foreign", other, ca), false, 0, "members accept only clients their server-ca.crt signed"},
				{"members not trusted", clientTLS(t, "distrust", ca, other), false, 0, "the hook checks the members' server certificates against etcd-client-ca.crt"},
				{"no certificate", nil, false, 0, "an https endpoint needs a client certificate; the hook never falls back to plain or unauthenticated calls"},
				{"garbage", &etcdclient.ClientTLS{ID: "garbage", Cert: []byte("x"), Key: []byte("y"), CA: ca.PEM}, true, 0, "material that does not parse is refused before any dial"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					c, err := pool.Cluster(ec.Endpoints(), tc.creds)
					if tc.wantNoConn {
						if err == nil {
							t.Fatalf("Cluster succeeded, want an error: %s", tc.reason)
						}
						return
					}
					if err != nil {
						t.Fatal(err)
					}
					ms, err := c.Membership(ctx)
					reachable := 0
					if err == nil {
						for _, m := range ms.Members {
							if m.Reachable {
								reachable++
							}
						}
					}
					if reachable != tc.reachable {
						t.Errorf("%d members reachable (err %v), want %d: %s", reachable, err, tc.reachable, tc.reason)
					}
				})
			}
		})
	}
}

// A rotated operator certificate (a new Secret resourceVersion, so a new
// ID) is used from the next sync on, without waiting for the old
// connections to break; and the old one keeps working until then.
func TestRotatedClientCertificateIsUsedOnTheNextSync(t *testing.T) {
	ec, ca := startTLSCluster(t, etcdtest.DefaultVersion, 1)
	pool := etcdclient.NewPool(0)
	t.Cleanup(pool.Close)

	for _, id := range []string{"uid/1", "uid/2", "uid/2"} {
		c, err := pool.Cluster(ec.Endpoints(), clientTLS(t, id, ca, ca))
		if err != nil {
			t.Fatal(err)
		}
		ms := readMembership(t, c)
		if diff := cmp.Diff([]memberSummary{{"m0", false, true, etcdtest.DefaultVersion}}, summarize(ms)); diff != "" {
			t.Errorf("with %s: membership (-want +got):\n%s", id, diff)
		}
		if got := etcdclient.ConnTLSIDs(pool); !cmp.Equal(got, []string{id}) {
			t.Errorf("with %s: connections made with %v, want only the current certificate's", id, got)
		}
	}
}
