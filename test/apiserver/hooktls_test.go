package apiserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
)

// The hook's serving certificate, as the default installs issue it: the
// chart at install time, kustomize users with manifests/tls/issue-certificate.sh.

// hookHost is the name Metacontroller calls the hook by, which the
// serving certificate must carry.
const hookHost = "etcd-hook.etcd-hook.svc"

// installedCert is the serving Secret TestChart's install issued, which
// its upgrade must keep.
var installedCert map[string][]byte

// servingSecret reads the stored etcd-hook-tls and checks that its
// certificate names hookHost and verifies against its ca.crt.
func servingSecret(t *testing.T, k *kube) map[string][]byte {
	t.Helper()
	var s corev1.Secret
	unmarshal(t, k.mustKubectl(t, "", "get", "secret", "etcd-hook-tls", "-n", chartHookNamespace, "-o", "json").stdout, &s)
	if _, err := tlstest.CheckServing(s.Data["ca.crt"], s.Data["tls.crt"], s.Data["tls.key"], hookHost); err != nil {
		t.Errorf("Secret etcd-hook-tls: %v", err)
	}
	return s.Data
}

// issueCertificate runs manifests/tls/issue-certificate.sh against the
// test's API server, twice: the second run must leave the Secret as the
// first made it.
func issueCertificate(t *testing.T, k *kube) map[string][]byte {
	t.Helper()
	run := func() string {
		cmd := exec.Command("sh", "manifests/tls/issue-certificate.sh")
		cmd.Dir = k.root
		cmd.Env = []string{"KUBECONFIG=" + k.kubeconfig, "HOME=" + k.home, "PATH=" + os.Getenv("PATH"), "KUBECTL=" + k.kubectlBin}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("manifests/tls/issue-certificate.sh: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := run(); !strings.Contains(out, "issued for "+hookHost) {
		t.Errorf("issue-certificate.sh said %q", out)
	}
	first := servingSecret(t, k)
	if out := run(); !strings.Contains(out, "left as it is") {
		t.Errorf("a second issue-certificate.sh said %q, want the Secret left as it is", out)
	}
	if second := servingSecret(t, k); !bytes.Equal(first["ca.crt"], second["ca.crt"]) {
		t.Error("a second issue-certificate.sh replaced the CA Metacontroller trusts")
	}
	return first
}

// syncOverTLS: the hook, serving the installed Secret's certificate,
// answers a sync request made as Metacontroller makes it: to
// https://etcd-hook.etcd-hook.svc, trusting ca.crt and nothing else.
func syncOverTLS(t *testing.T, k *kube, secret map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, name), secret[name], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	plainPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	tlsPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := testenv.Start(testenv.ProcessSpec{
		Path: testenv.Binary(t, "etcd-hook"),
		Args: []string{
			fmt.Sprintf("--addr=127.0.0.1:%d", plainPort), fmt.Sprintf("--tls-addr=127.0.0.1:%d", tlsPort),
			"--tls-cert-file=" + filepath.Join(dir, "tls.crt"), "--tls-key-file=" + filepath.Join(dir, "tls.key"),
		},
		Env:     []string{"PATH=/usr/bin:/bin"},
		LogPath: filepath.Join(dir, "hook.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(5 * time.Second) }()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(secret["ca.crt"])
	addr := fmt.Sprintf("127.0.0.1:%d", tlsPort)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: hookHost, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	body, err := os.ReadFile(filepath.Join(k.root, "test", "fixtures", "new-cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://%s:%d/sync", hookHost, tlsPort)
	var resp *http.Response
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err = client.Post(url, "application/json", bytes.NewReader(body))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "hook.log"))
		t.Fatalf("a sync over TLS did not reach the hook: %v\n%s", err, log)
	}
	defer resp.Body.Close()
	var answer struct {
		Children []json.RawMessage `json:"children"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != http.StatusOK || len(answer.Children) == 0 {
		t.Errorf("a sync over TLS: HTTP %d, %d children, %v; want 200 and the new cluster's children", resp.StatusCode, len(answer.Children), err)
	}
	t.Logf("a sync over TLS, verified against the chart's ca.crt for %s: HTTP %d, %d children", hookHost, resp.StatusCode, len(answer.Children))
}
