package harness

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

func TestMain(m *testing.M) {
	// The test binary doubles as a stand-in hook executable for
	// TestHookProcessKillRestart, started by HookProcess like bin/etcd-hook.
	if os.Getenv(fakeHookEnv) == "1" {
		os.Exit(runFakeHookProcess(os.Args[1:]))
	}
	Main(m)
}

const ns = "default"

// requireEtcd skips (fails with CI=true) without the etcd binary.
func requireEtcd(t *testing.T, version string) {
	t.Helper()
	testenv.Binary(t, testenv.Etcd(version))
}

func newEnvWithFake(t *testing.T, opts Options) (*Env, *fakeHook) {
	t.Helper()
	fake := newFakeHook()
	t.Cleanup(fake.Close)
	opts.HookURL = fake.URL()
	return New(t, opts), fake
}

var plainHTTP = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// etcdKV talks to etcd's JSON gateway, so that the test needs no gRPC client.
func etcdKV(ctx context.Context, endpoint, op string, body map[string]any) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/v3/kv/"+op, bytes.NewReader(mustJSON(body)))
	if err != nil {
		return nil, err
	}
	resp, err := plainHTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", op, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd %s: HTTP %d: %s", op, resp.StatusCode, data)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("etcd %s: %w", op, err)
	}
	return out, nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func etcdPut(ctx context.Context, endpoint, key, value string) error {
	_, err := etcdKV(ctx, endpoint, "put", map[string]any{"key": b64(key), "value": b64(value)})
	return err
}

func etcdGet(ctx context.Context, endpoint, key string) (string, error) {
	out, err := etcdKV(ctx, endpoint, "range", map[string]any{"key": b64(key)})
	if err != nil {
		return "", err
	}
	kvs, _ := out["kvs"].([]any)
	if len(kvs) == 0 {
		return "", fmt.Errorf("key %q: %w", key, ErrNotFound)
	}
	v, err := base64.StdEncoding.DecodeString(nestedString(kvs[0], "value"))
	return string(v), err
}

func etcdVersion(ctx context.Context, endpoint string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := plainHTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("version: %w", err)
	}
	defer resp.Body.Close()
	var v struct {
		Server string `json:"etcdserver"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", fmt.Errorf("version: %w", err)
	}
	return v.Server, nil
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func mustWait(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func restartCount(pod Object) int64 {
	cs, _ := nested(pod, "status", "containerStatuses")
	list, _ := cs.([]any)
	if len(list) == 0 {
		return -1
	}
	n, _ := nestedInt(list[0], "restartCount")
	return n
}
