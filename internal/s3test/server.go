package s3test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
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

	proc *testenv.Process
}

// stopGrace is how long versitygw gets to shut down on SIGTERM.
const stopGrace = 5 * time.Second

// Start runs a server until the test ends. A missing bin/versitygw skips
// the test on a developer's machine and fails it in CI, where the Makefile
// builds it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := testenv.Binary(t, testenv.Versitygw)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := testenv.FreePort()
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
	addr := net.JoinHostPort(testenv.Loopback, strconv.Itoa(port))
	p, err := testenv.Start(testenv.ProcessSpec{
		Name:    "versitygw",
		Path:    bin,
		Args:    []string{"--port", addr, "--quiet", "posix", data},
		Env:     append(os.Environ(), "ROOT_ACCESS_KEY_ID="+AccessKey, "ROOT_SECRET_ACCESS_KEY="+SecretKey, "VGW_REGION="+Region),
		LogPath: logPath,
	})
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	s := &Server{URL: "http://" + addr, Dir: data, proc: p}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if p.Exited() {
			log, _ := testenv.ReadLogFrom(logPath, p.LogOffset)
			return nil, fmt.Errorf("versitygw on %s exited at start:\n%s", addr, log)
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

// Stop ends the server: SIGTERM, then SIGKILL after stopGrace.
func (s *Server) Stop() {
	_ = s.proc.Stop(stopGrace)
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
