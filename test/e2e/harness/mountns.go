package harness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// The sandbox: the test binary re-executes itself in a private mount namespace
// (CLONE_NEWNS; Go's exec also marks / as MS_REC|MS_PRIVATE, as unshare(1)
// --propagation private does) and there bind-mounts its own /etc/resolv.conf,
// /etc/hosts and /etc/nsswitch.conf over the real ones. Every process the tests
// start (the hook, each etcd) inherits the namespace and so resolves Pod DNS
// names through the harness DNS server, and so does the test process itself.
// The machine's files are never written: the mounts vanish with the namespace.

const sandboxEnv = "ETCDHOOK_E2E_SANDBOX"

// sandbox is the state of this process, set once by Main before m.Run.
var sandbox struct {
	active bool
	reason string // why the sandbox is not active
	dns    *DNSServer
}

// Main is to be called from TestMain. It re-executes the test binary inside
// the sandbox and exits with its status; started by the kubelet as a CoreOS
// check-dns container, it runs that instead (checkdns.go). Where the sandbox cannot be had (not
// root, no mount namespaces) it runs the tests in place, and every test that
// calls Require is skipped, or fails when CI=true.
func Main(m *testing.M) {
	// The kubelet runs the CoreOS check-dns init container as this binary
	// (checkdns.go), inside the sandbox already.
	if code, ok := checkDNSMain(os.Args[1:]); ok {
		os.Exit(code)
	}
	if os.Getenv(sandboxEnv) == "1" {
		os.Exit(runInSandbox(m))
	}
	if reason := sandboxUnavailable(); reason != "" {
		sandbox.reason = reason
		os.Exit(m.Run())
	}
	code, err := reexecInSandbox()
	if err != nil {
		sandbox.reason = fmt.Sprintf("cannot re-execute in a private mount namespace: %v", err)
		os.Exit(m.Run())
	}
	os.Exit(code)
}

// Require skips the test when the sandbox is not active (fails with CI=true).
func Require(t testing.TB) {
	t.Helper()
	if sandbox.active {
		return
	}
	reason := sandbox.reason
	if reason == "" {
		reason = "harness.Main was not called from TestMain"
	}
	testenv.SkipOrFail(t, "e2e sandbox unavailable: %s", reason)
}

// SandboxDNS returns the sandbox's DNS server, or nil outside the sandbox.
func SandboxDNS() *DNSServer { return sandbox.dns }

func sandboxUnavailable() string {
	if runtime.GOOS != "linux" {
		return "mount namespaces need Linux, this is " + runtime.GOOS
	}
	if os.Geteuid() != 0 {
		return "not root: a private mount namespace and a DNS server on port 53 need root"
	}
	if _, err := os.Stat("/proc/self/ns/mnt"); err != nil {
		return fmt.Sprintf("no mount namespace support: %v", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		// Not used (Go unshares itself) but its absence marks a system
		// stripped of util-linux, where namespaces are unlikely to work.
		return "unshare(1) not found"
	}
	return ""
}

func reexecInSandbox() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("find test binary: %w", err)
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(withGODEBUG(os.Environ(), "netdns=go"), sandboxEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start: %w", err)
	}
	// Forward the signals go test and users send, so that the child runs
	// its cleanups and stops its processes.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(sigs)
	close(sigs)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("wait: %w", err)
	}
	return 0, nil
}

// withGODEBUG adds a setting to GODEBUG, keeping what is there.
func withGODEBUG(env []string, setting string) []string {
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			found = true
			if v != "" {
				kv = "GODEBUG=" + v + "," + setting
			} else {
				kv = "GODEBUG=" + setting
			}
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, "GODEBUG="+setting)
	}
	return out
}

func runInSandbox(m *testing.M) int {
	cleanup, err := setupSandbox()
	if err != nil {
		sandbox.reason = err.Error()
		fmt.Fprintf(os.Stderr, "harness: sandbox setup failed: %v\n", err)
	} else {
		sandbox.active = true
	}
	code := m.Run()
	if cleanup != nil {
		cleanup()
	}
	return code
}

// privateMountNS makes sure this process is not in its parent's mount
// namespace before anything is mounted, so that a wrong turn can never
// shadow the machine's /etc/resolv.conf.
func privateMountNS() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read own mount namespace: %w", err)
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err != nil {
		return fmt.Errorf("read parent mount namespace: %w", err)
	}
	if self == parent {
		return fmt.Errorf("still in the parent's mount namespace %s", self)
	}
	return nil
}

func setupSandbox() (func(), error) {
	if err := privateMountNS(); err != nil {
		return nil, err
	}
	var dns *DNSServer
	var err error
	// A private address per test binary, so that packages tested in
	// parallel each have their own server on port 53.
	for range 32 {
		addr := fmt.Sprintf("127.53.%d.%d:53", 1+rand.IntN(254), 1+rand.IntN(254))
		if dns, err = StartDNS(addr); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("start sandbox DNS: %w", err)
	}
	dir, err := os.MkdirTemp("", "etcdhook-e2e-etc-")
	if err != nil {
		dns.Close()
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	files := map[string]string{
		// ndots:5 and the search list are those of a Pod in Kubernetes, so
		// short names like <svc>.<ns> behave the same here.
		"/etc/resolv.conf": fmt.Sprintf("nameserver %s\nsearch svc.cluster.local cluster.local\noptions ndots:5 timeout:1 attempts:3\n", dns.Addr().Addr()),
		// Without the Pod names, so that DNS is the only way to them.
		"/etc/hosts":         "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"/etc/nsswitch.conf": "hosts: files dns\n",
	}
	var mounted []string
	cleanup := func() {
		for _, target := range mounted {
			_ = syscall.Unmount(target, syscall.MNT_DETACH)
		}
		dns.Close()
		os.RemoveAll(dir)
	}
	for _, target := range sortedKeys(files) {
		src := filepath.Join(dir, filepath.Base(target))
		if err := os.WriteFile(src, []byte(files[target]), 0o644); err != nil {
			cleanup()
			return nil, fmt.Errorf("write %s: %w", src, err)
		}
		if _, err := os.Stat(target); err != nil {
			if target == "/etc/nsswitch.conf" {
				continue // absent means "files dns" to Go and glibc anyway
			}
			cleanup()
			return nil, fmt.Errorf("bind target %s: %w", target, err)
		}
		if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
			cleanup()
			return nil, fmt.Errorf("bind-mount %s over %s: %w", src, target, err)
		}
		mounted = append(mounted, target)
	}
	sandbox.dns = dns
	return cleanup, nil
}
