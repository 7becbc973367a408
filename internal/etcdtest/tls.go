package etcdtest

import (
	"path/filepath"
	"testing"

	"github.com/etcdhook/etcd-hook/internal/tlstest"
)

// StartTLSCluster is StartCluster with members that serve clients TLS with
// client-certificate auth, as the member Pods of an EtcdCluster with
// spec.TLS do, from a new CA's server leaf (which names 127.0.0.1); it
// returns the CA, which signs the clients' certificates too.
func StartTLSCluster(t testing.TB, opts Options) (*Cluster, *tlstest.CA) {
	t.Helper()
	ca, err := tlstest.NewCA("etcd ca")
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := ca.IssueCluster("demo", "prod", "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := tlstest.WriteFiles(dir, secrets.Server); err != nil {
		t.Fatal(err)
	}
	opts.ClientTLS = &ServerTLS{
		CertFile: filepath.Join(dir, "server.crt"), KeyFile: filepath.Join(dir, "server.key"), TrustedCAFile: filepath.Join(dir, "server-ca.crt"),
	}
	return StartCluster(t, opts), ca
}
