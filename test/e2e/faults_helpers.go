package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// Failure is one fault's line in the failure table, the reliability
// counterpart of Figure.
type Failure struct {
	Fault    string
	Expected string
	Observed string
	Acked    int
	Lost     int
	// Healthy runs from the end of the fault (heal, SIGCONT, a fixed spec,
	// the hook answering again; for a deletion or a kill, the fault itself)
	// to the first moment the world was checked converged. Zero with
	// Undisturbed: the cluster never stopped being healthy.
	Healthy     time.Duration
	Undisturbed bool
	// HealthyNote replaces Healthy where the cluster cannot heal by
	// itself, by design.
	HealthyNote string
}

// FailureHeader is the failure table's header, markdown for RELIABILITY.md.
const FailureHeader = "| fault | expected | observed | writes acknowledged | writes lost | time to healthy |\n|---|---|---|---|---|---|\n"

// Line renders the failure as a table row.
func (f Failure) Line() string {
	healthy := round(f.Healthy)
	if f.Undisturbed {
		healthy = "never unhealthy"
	}
	if f.HealthyNote != "" {
		healthy = f.HealthyNote
	}
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	return fmt.Sprintf("| %s | %s | %s | %d | %d | %s |", cell(f.Fault), cell(f.Expected), cell(f.Observed), f.Acked, f.Lost, healthy)
}

// failureReportEnv names the failure table's file. Without it, the table
// goes next to ETCDHOOK_E2E_REPORT's: report.md gives report-failures.md.
const failureReportEnv = "ETCDHOOK_E2E_FAILURE_REPORT"

func failureReportPath() (string, error) {
	if p := os.Getenv(failureReportEnv); p != "" {
		return testenv.FromModuleRoot(p)
	}
	p, err := reportPath()
	if err != nil || p == "" {
		return "", err
	}
	ext := filepath.Ext(p)
	return strings.TrimSuffix(p, ext) + "-failures" + ext, nil
}

// StartFailureReport truncates the failure table's file and writes the header.
func StartFailureReport() error {
	p, err := failureReportPath()
	if err != nil || p == "" {
		return err
	}
	return os.WriteFile(p, []byte(FailureHeader), 0o644)
}

// ReportFailure logs the line and appends it to the failure table. A test
// that failed says so in its line: the table must not read as a pass.
func ReportFailure(t testing.TB, f Failure) {
	t.Helper()
	if t.Failed() {
		f.Observed = "FAILED: " + f.Observed
	}
	appendTableLine(t, "failures", FailureHeader, f.Line(), failureReportPath)
}

// StartKeepAliveWriter is StartWriter with gRPC keepalive, as etcd's
// client documentation recommends to applications: without it, a
// connection to a member that is cut off or frozen stays open and every put
// on it times out for as long as the fault lasts; with it, the client
// notices within seconds and dials the Service again, which now resolves to
// the members that are ready.
func StartKeepAliveWriter(ctx context.Context, endpoint, prefix string) (*Writer, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		TLS:         clientTLSForURL(endpoint),
		DialTimeout: 2 * time.Second,
		// etcd refuses pings more frequent than --grpc-keepalive-min-time, 5 s.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Writer{Prefix: prefix, cli: cli, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx)
	return w, nil
}

// HookAnswer is what the hook said to a request sent straight to it.
type HookAnswer struct {
	Status      int
	ContentType string
	// Error is the "error" field of a JSON body, "" when there is none.
	Error string
	Body  string
}

// PostHook sends body to the hook's route as Metacontroller would, with the
// given Content-Type, past the fault proxy.
func PostHook(ctx context.Context, url, contentType string, body []byte) (HookAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return HookAnswer{}, err
	}
	req.Header.Set("Content-Type", contentType)
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return HookAnswer{}, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return HookAnswer{}, fmt.Errorf("POST %s: read answer: %w", url, err)
	}
	a := HookAnswer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: string(data)}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil {
		a.Error = e.Error
	}
	return a, nil
}

// PutVia puts key through the given endpoints only, bounded by timeout: a
// client that knows of the faulty member only through its others.
func PutVia(ctx context.Context, endpoints []string, key, value string, timeout time.Duration) error {
	cli, err := NewClient(endpoints...)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = cli.Put(ctx, key, value)
	return err
}

// LocalGet reads key from one member's own store (a serializable read): it
// answers what that member has applied, which tells whether it caught up.
func LocalGet(ctx context.Context, endpoint, key string) (string, bool, error) {
	cli, err := NewClient(endpoint)
	if err != nil {
		return "", false, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		return "", false, err
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

// ConditionMessage returns a condition's message, "" if absent.
func (s ParentStatus) ConditionMessage(typ string) string {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

// PodPhase reads a Pod's phase from the API server, "" when it is gone.
func (c *Cluster) PodPhase(name string) string {
	obj, ok := c.Env.Pod(c.Namespace, name)
	if !ok {
		return ""
	}
	st, _ := obj["status"].(map[string]any)
	phase, _ := st["phase"].(string)
	return phase
}
