package apiserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const (
	// loopback is the only address anything here binds or dials.
	loopback = "127.0.0.1"

	// readyTimeout bounds the wait for /readyz: kube-apiserver starts in a
	// few seconds, longer on a loaded 2-core CI machine.
	readyTimeout = 90 * time.Second
	// stopTimeout bounds the graceful stop before SIGKILL.
	stopTimeout = 15 * time.Second
	// kubectlTimeout bounds one kubectl invocation.
	kubectlTimeout = 60 * time.Second
	// startAttempts bounds retries after another process took the port
	// picked for the API server between the probe and its bind.
	startAttempts = 3

	// serviceCIDR is only allocated from, never routed: nothing here runs
	// Pods or proxies Services.
	serviceCIDR = "10.96.0.0/16"

	buildHint = "make kube-bins"
)

// kube is a running kube-apiserver and the means to talk to it.
type kube struct {
	root       string // the module root, where kubectl runs
	kubectlBin string
	url        string // https://127.0.0.1:<port>
	token      string // bearer token of a system:masters user
	kubeconfig string
	home       string // HOME for kubectl: its discovery cache lives here
	client     *http.Client
	logPath    string
}

// checkVersion fails when bin does not report the pinned release: a
// binary left over from before a bump of tools/kube/go.mod.
func checkVersion(t testing.TB, bin, want string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	if !strings.Contains(string(out), want+"\n") {
		t.Fatalf("%s is not %s (it says %q); tools/kube/go.mod pins %s: run %q to rebuild it",
			bin, want, strings.TrimSpace(string(out)), want, buildHint)
	}
}

// startKube starts etcd and kube-apiserver for the test and registers the
// cleanup that stops them (API server first), by pid.
func startKube(t *testing.T) *kube {
	t.Helper()
	root := testenv.ModuleRoot(t)
	apiserverBin := testenv.Binary(t, testenv.KubeAPIServer)
	kubectlBin := testenv.Binary(t, testenv.Kubectl)
	version := testenv.PinnedVersion(t, "tools/kube", "k8s.io/kubernetes")
	checkVersion(t, apiserverBin, version, "--version")
	checkVersion(t, kubectlBin, version, "version", "--client", "-o", "yaml")

	// The API server's store. --unsafe-no-fsync: its data is thrown away.
	store := etcdtest.StartCluster(t, etcdtest.Options{
		Version:   etcdtest.Version36,
		ExtraArgs: []string{"--unsafe-no-fsync"},
	})

	dir := t.TempDir()
	k := &kube{
		root:       root,
		kubectlBin: kubectlBin,
		home:       filepath.Join(dir, "home"),
		kubeconfig: filepath.Join(dir, "kubeconfig"),
		token:      randomHex(t, 16),
	}
	if err := os.Mkdir(k.home, 0o700); err != nil {
		t.Fatal(err)
	}

	// A static token for a member of system:masters, which RBAC lets do
	// anything (including bind the ClusterRole of manifests/).
	tokens := filepath.Join(dir, "tokens.csv")
	writeFile(t, tokens, k.token+",etcd-hook-test-admin,etcd-hook-test-admin,system:masters\n", 0o600)

	// The key the API server signs and verifies service-account tokens with.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	saKey := filepath.Join(dir, "service-account.key")
	writeFile(t, saKey, string(pem.EncodeToMemory(&pem.Block{
		Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key),
	})), 0o600)

	certDir := filepath.Join(dir, "certs")
	for attempt := 1; ; attempt++ {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		k.url = "https://" + net.JoinHostPort(loopback, strconv.Itoa(port))
		k.logPath = filepath.Join(dir, fmt.Sprintf("kube-apiserver-%d.log", attempt))
		args := []string{
			"--etcd-servers=" + strings.Join(store.Endpoints(), ","),
			"--bind-address=" + loopback,
			"--advertise-address=" + loopback,
			"--secure-port=" + strconv.Itoa(port),
			// A self-signed serving certificate (and its CA) for
			// 127.0.0.1, generated into cert-dir at start.
			"--cert-dir=" + certDir,
			"--token-auth-file=" + tokens,
			"--authorization-mode=RBAC",
			"--service-account-key-file=" + saKey,
			"--service-account-signing-key-file=" + saKey,
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-cluster-ip-range=" + serviceCIDR,
			// The kubernetes Service's endpoints would be 127.0.0.1,
			// which Endpoints validation refuses; nothing here needs them.
			"--endpoint-reconciler-type=none",
			"--profiling=false",
		}
		proc := startProcess(t, apiserverBin, args, k.logPath)
		err = k.waitReady(certDir, proc)
		if err == nil {
			break
		}
		stopProcess(t, proc)
		log := logTail(k.logPath)
		if attempt < startAttempts && strings.Contains(log, "address already in use") {
			t.Logf("kube-apiserver lost a port race, retrying on another port: %v", err)
			continue
		}
		t.Fatalf("kube-apiserver: %v\n--- log tail (%s):\n%s", err, k.logPath, log)
	}
	k.writeKubeconfig(t, filepath.Join(certDir, "apiserver.crt"))
	return k
}

// waitReady polls /readyz until it answers 200, the process exits, or
// readyTimeout passes. It also builds k.client once the serving
// certificate exists.
func (k *kube) waitReady(certDir string, proc *testenv.Process) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-proc.Done():
			return fmt.Errorf("exited before it was ready: %v", proc.WaitErr())
		case <-time.After(250 * time.Millisecond):
		}
		if k.client == nil {
			c, err := httpClient(filepath.Join(certDir, "apiserver.crt"))
			if err != nil {
				last = err
				continue
			}
			k.client = c
		}
		status, body, err := k.do(http.MethodGet, "/readyz", "", nil)
		switch {
		case err != nil:
			last = err
		case status != http.StatusOK:
			last = fmt.Errorf("/readyz: HTTP %d: %s", status, body)
		default:
			return nil
		}
	}
	return fmt.Errorf("not ready after %v: %v", readyTimeout, last)
}

// httpClient trusts the self-signed CA kube-apiserver wrote into its cert
// dir next to its serving certificate, and nothing else.
func httpClient(certFile string) (*http.Client, error) {
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("%s: no certificate yet", certFile)
	}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			Proxy:           nil, // loopback only, whatever the environment says
		},
	}, nil
}

func (k *kube) writeKubeconfig(t testing.TB, caFile string) {
	t.Helper()
	writeFile(t, k.kubeconfig, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: apiserver-test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: apiserver-test
  context:
    cluster: apiserver-test
    user: admin
current-context: apiserver-test
`, k.url, caFile, k.token), 0o600)
}

// do sends one request with the admin token; body, when not nil, is JSON
// unless contentType says otherwise.
func (k *kube) do(method, path, contentType string, body []byte) (int, []byte, error) {
	status, _, b, err := k.doHeaders(method, path, contentType, body)
	return status, b, err
}

// doHeaders is do that also returns the response headers (warnings).
func (k *kube) doHeaders(method, path, contentType string, body []byte) (int, http.Header, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
		if contentType == "" {
			contentType = "application/json"
		}
	}
	req, err := http.NewRequest(method, k.url+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+k.token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, resp.Header, b, err
}

// result is what one kubectl invocation did.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("kubectl %s: exit %d\n--- stdout:\n%s--- stderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// kubectl runs bin/kubectl from the module root against the test's API
// server, with stdin (if not empty) on its standard input.
func (k *kube) kubectl(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.kubectlBin, args...)
	cmd.Dir = k.root
	cmd.Env = []string{
		"KUBECONFIG=" + k.kubeconfig,
		"HOME=" + k.home,
		"PATH=" + os.Getenv("PATH"),
		"LANG=C",
		"NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1",
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		r.code = exit.ExitCode()
	default:
		t.Fatalf("kubectl %s: %v (timeout %v)\n%s", strings.Join(args, " "), err, kubectlTimeout, stderr.String())
	}
	return r
}

// mustKubectl is kubectl that fails the test on a non-zero exit code.
func (k *kube) mustKubectl(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	r := k.kubectl(t, stdin, args...)
	if r.code != 0 {
		t.Fatal(r)
	}
	return r
}

// startProcess starts bin with its output in logPath. A cleanup stops it,
// by its pid, and shows its log tail if the test failed.
func startProcess(t testing.TB, bin string, args []string, logPath string) *testenv.Process {
	t.Helper()
	p, err := testenv.Start(testenv.ProcessSpec{
		Path:    bin,
		Args:    args,
		Env:     []string{"PATH=" + os.Getenv("PATH"), "NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1"},
		LogPath: logPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopProcess(t, p)
		if t.Failed() {
			t.Logf("--- %s log tail (%s):\n%s", p.Name, logPath, logTail(logPath))
		}
	})
	return p
}

// stopProcess sends SIGTERM, then SIGKILL to the process group if it has
// not exited within stopTimeout. Safe to call more than once.
func stopProcess(t testing.TB, p *testenv.Process) {
	t.Helper()
	if err := p.Stop(stopTimeout); err != nil {
		t.Error(err)
	}
}

// logTail returns the last lines of a log file, or why it could not.
func logTail(path string) string {
	s, err := testenv.TailFile(path, 60)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return s
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
