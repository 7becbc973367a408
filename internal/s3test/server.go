package s3test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
)

// Root credentials of every test server.
const (
	AccessKey = "etcdhooktest"
	SecretKey = "etcdhooktest-secret-key"
	Region    = "us-east-1"
)

// Server is one versitygw process.
type Server struct {
	// URL is the S3 endpoint, http://127.0.0.1:<port>.
	URL string
	// Dir is the posix backend's root: each bucket is a directory in it.
	Dir string

	cmd  *exec.Cmd
	done chan struct{}
}

// Binary returns bin/versitygw. A missing binary skips the test on a
// developer's machine and fails it in CI, where the Makefile builds it.
func Binary(t testing.TB) string {
	t.Helper()
	root, err := etcdtest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "bin", "versitygw")
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		msg := "s3test: " + p + " is missing; run \"make bin/versitygw\""
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// Start runs a server until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s, err := start(bin, data, filepath.Join(dir, "versitygw.log"), port)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	t.Fatalf("s3test: %v", lastErr)
	return nil
}

func start(bin, data, logPath string, port int) (*Server, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", data)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+AccessKey, "ROOT_SECRET_ACCESS_KEY="+SecretKey, "VGW_REGION="+Region)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s := &Server{URL: "http://" + addr, Dir: data, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(s.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		select {
		case <-s.done:
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("versitygw on %s exited at start:\n%s", addr, log)
		default:
		}
		// Any HTTP answer, even an access error, means it serves.
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return s, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Stop()
	return nil, fmt.Errorf("versitygw on %s did not answer within 20s", addr)
}

// Stop ends the server: SIGTERM, then SIGKILL after 5 s.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// CreateBucket makes a bucket: with the posix backend, a directory.
func (s *Server) CreateBucket(t testing.TB, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(s.Dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
}

// AWSDir writes the AWS shared files a CoreOS awsSecret holds, with the
// given keys, and returns their directory.
func AWSDir(t testing.TB, accessKey, secretKey string) string {
	t.Helper()
	dir := t.TempDir()
	creds := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", accessKey, secretKey)
	config := "[default]\nregion = " + Region + "\n"
	if err := os.WriteFile(filepath.Join(dir, "credentials"), []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
