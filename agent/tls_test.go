package agent

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
)

// startTLSCluster starts members that serve clients TLS with client
// certificate auth, and returns the CA that signed their certificates.
func startTLSCluster(t *testing.T, size int) (*etcdtest.Cluster, *tlstest.CA) {
	t.Helper()
	return etcdtest.StartTLSCluster(t, etcdtest.Options{Size: size, Version: etcdtest.Version37})
}

func newCA(t *testing.T, name string) *tlstest.CA {
	t.Helper()
	ca, err := tlstest.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// clientFiles writes a client Secret as a run Pod mounts it: a leaf signer
// issued, and the CA the members are trusted by.
func clientFiles(t *testing.T, signer, trusted *tlstest.CA) ClientTLSFiles {
	t.Helper()
	leaf, err := signer.Issue(tlstest.LeafOptions{CommonName: "etcd-backup", Usage: tlstest.Client})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := ClientTLSFiles{Cert: filepath.Join(dir, "etcd-client.crt"), Key: filepath.Join(dir, "etcd-client.key"), CA: filepath.Join(dir, "etcd-client-ca.crt"), Secret: "demo-operator"}
	for path, data := range map[string][]byte{f.Cert: leaf.CertPEM, f.Key: leaf.KeyPEM, f.CA: trusted.PEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestBackupOfTLSCluster: a cluster whose members serve clients TLS and
// accept only certificates of their CA is backed up with a certificate of
// that CA, from the member list's https URLs too; a certificate of another
// CA, or none, fails the run with a reason that says so, and leaves no file.
func TestBackupOfTLSCluster(t *testing.T) {
	ec, ca := startTLSCluster(t, 3)
	good := clientFiles(t, ca, ca)
	tc, err := LoadClientTLS(good, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), TLS: tc, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put, err := cli.Put(context.Background(), "/acked", "v")
	if err != nil {
		t.Fatal(err)
	}

	root := t.TempDir()
	store, err := NewFileStore(root, "backups")
	if err != nil {
		t.Fatal(err)
	}
	backup := func(t *testing.T, tc *tls.Config, file string) report.BackupResult {
		t.Helper()
		// One endpoint, as the client Service is: the others come from
		// etcd's member list, as https URLs.
		return Backup(context.Background(), BackupOptions{Endpoints: ec.Endpoints()[:1], TLS: tc, Timeout: time.Minute}, store, file)
	}

	res := backup(t, tc, "good.backup")
	if !res.Succeeded || res.EtcdRevision < put.Header.Revision || !strings.HasPrefix(res.Member, "https://") {
		t.Fatalf("result %+v: want a backup at revision >= %d from an https member", res, put.Header.Revision)
	}
	if fi, err := os.Stat(filepath.Join(root, "good.backup")); err != nil || fi.Size() != res.Size {
		t.Errorf("stored file: %v, %v; want %d bytes", fi, err, res.Size)
	}

	other := newCA(t, "another ca")
	load := func(f ClientTLSFiles) *tls.Config {
		tc, err := LoadClientTLS(f, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tc
	}
	for _, tt := range []struct {
		name    string
		tls     *tls.Config
		wantErr string
	}{
		{"certificate of another CA", load(clientFiles(t, other, ca)), "refused the client certificate"},
		{"members not trusted", load(clientFiles(t, ca, other)), "does not verify against the CA given (--cacert)"},
		{"no certificate", nil, "serves TLS, and no client certificate was given"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Each waits out the agent's calls: in parallel.
			t.Parallel()
			file := strings.ReplaceAll(tt.name, " ", "-") + ".backup"
			res := backup(t, tt.tls, file)
			t.Logf("reason: %s", res.Reason)
			if res.Succeeded || !strings.Contains(res.Reason, tt.wantErr) {
				t.Errorf("succeeded %v, reason %q; want a failure naming %q", res.Succeeded, res.Reason, tt.wantErr)
			}
			if _, err := os.Stat(filepath.Join(root, file)); !os.IsNotExist(err) {
				t.Errorf("a failed run left a file: %v", err)
			}
		})
	}
}

// TestLoadClientTLS: each problem with the files is named by the file,
// and a file missing from a mounted Secret by the Secret and key.
func TestLoadClientTLS(t *testing.T) {
	ca := newCA(t, "etcd ca")
	good := clientFiles(t, ca, ca)
	expiredLeaf, err := ca.Issue(tlstest.LeafOptions{CommonName: "old", Usage: tlstest.Client, Lifetime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	otherLeaf, err := ca.Issue(tlstest.LeafOptions{CommonName: "other", Usage: tlstest.Client})
	if err != nil {
		t.Fatal(err)
	}
	// edit copies the good files into a new directory, with changes.
	edit := func(change func(f *ClientTLSFiles, files map[string][]byte)) ClientTLSFiles {
		dir := t.TempDir()
		f := ClientTLSFiles{Cert: filepath.Join(dir, "etcd-client.crt"), Key: filepath.Join(dir, "etcd-client.key"), CA: filepath.Join(dir, "etcd-client-ca.crt"), Secret: good.Secret}
		files := map[string][]byte{}
		for from, to := range map[string]string{good.Cert: f.Cert, good.Key: f.Key, good.CA: f.CA} {
			data, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			files[to] = data
		}
		change(&f, files)
		for path, data := range files {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	later := time.Now().Add(2 * time.Minute)
	tests := []struct {
		name    string
		reason  string
		files   ClientTLSFiles
		now     time.Time
		wantErr string
	}{
		{name: "good", reason: "the files a Secret of the cluster's CA gives", files: good},
		{name: "Secret missing", reason: "an optional mount of a missing Secret is an empty directory: the Secret is named",
			files:   edit(func(f *ClientTLSFiles, files map[string][]byte) { clear(files) }),
			wantErr: `the client certificate ` + "%dir%" + `/etcd-client.crt is missing: the Secret "demo-operator", mounted at ` + "%dir%" + `, is not there or has no key "etcd-client.crt"`},
		{name: "key missing", reason: "a Secret without one key: that key is named",
			files:   edit(func(f *ClientTLSFiles, files map[string][]byte) { delete(files, f.Key) }),
			wantErr: `the client key ` + "%dir%" + `/etcd-client.key is missing: the Secret "demo-operator", mounted at ` + "%dir%" + `, is not there or has no key "etcd-client.key"`},
		{name: "by hand", reason: "without a Secret, the file's own error",
			files:   edit(func(f *ClientTLSFiles, files map[string][]byte) { delete(files, f.CA); f.Secret = "" }),
			wantErr: `the CA: open ` + "%dir%" + `/etcd-client-ca.crt: no such file or directory`},
		{name: "certificate not PEM", reason: "the file is named",
			files:   edit(func(f *ClientTLSFiles, files map[string][]byte) { files[f.Cert] = []byte("not a certificate") }),
			wantErr: `the client certificate ` + "%dir%" + `/etcd-client.crt: holds no PEM certificate`},
		{name: "key not PEM", reason: "the file is named",
			files:   edit(func(f *ClientTLSFiles, files map[string][]byte) { files[f.Key] = []byte("not a key") }),
			wantErr: `the client key ` + "%dir%" + `/etcd-client.key holds no PEM private key`},
		{name: "CA not PEM", reason: "the file is named",
			files:   edit(func(f *ClientTLSFiles, files map[string][]byte) { files[f.CA] = []byte("not a CA") }),
			wantErr: `the CA ` + "%dir%" + `/etcd-client-ca.crt holds no PEM certificate`},
		{name: "empty file", reason: "a key of a Secret with an empty value",
			files:   edit(func(f *ClientTLSFiles, files map[string][]byte) { files[f.Cert] = nil }),
			wantErr: `the client certificate ` + "%dir%" + `/etcd-client.crt is empty`},
		{name: "key of another certificate", reason: "both files are named",
			files:   edit(func(f *ClientTLSFiles, files map[string][]byte) { files[f.Key] = otherLeaf.KeyPEM }),
			wantErr: `the client certificate ` + "%dir%" + `/etcd-client.crt and key ` + "%dir%" + `/etcd-client.key: client certificate and key: tls: private key does not match public key`},
		{name: "expired", reason: "members refuse it with an alert that does not say why",
			files: edit(func(f *ClientTLSFiles, files map[string][]byte) {
				files[f.Cert], files[f.Key] = expiredLeaf.CertPEM, expiredLeaf.KeyPEM
			}), now: later,
			wantErr: `the client certificate ` + "%dir%" + `/etcd-client.crt expired at `},
		{name: "incomplete", reason: "a rendering mistake, named before anything runs",
			files: ClientTLSFiles{Cert: good.Cert, Key: good.Key}, wantErr: "a client certificate needs --cert, --key and --cacert together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = time.Now()
			}
			cfg, err := LoadClientTLS(tt.files, now)
			want := strings.ReplaceAll(tt.wantErr, "%dir%", filepath.Dir(tt.files.Cert))
			switch {
			case tt.wantErr == "" && (err != nil || cfg == nil || len(cfg.Certificates) != 1 || cfg.RootCAs == nil):
				t.Errorf("%s: %v, config %v", tt.reason, err, cfg)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), want)):
				t.Errorf("%s: error %v\nwant %q", tt.reason, err, want)
			}
		})
	}
}
