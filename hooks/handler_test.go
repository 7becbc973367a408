package hooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/reconcile"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// noEtcd fails the test if a sync tries to reach etcd: every fixture here
// has no running Pod, so a correct hook never dials.
// A nil t makes a dial a plain failure, as for fuzzed requests whose Pods
// may well claim to be running.
type noEtcd struct{ t *testing.T }

func (d noEtcd) Cluster(endpoints []string, _ *etcdclient.ClientTLS) (etcdclient.Cluster, error) {
	if d.t != nil {
		d.t.Errorf("unexpected etcd dial at %v", endpoints)
	}
	return nil, errors.New("no etcd in this test")
}

type nopRecorder struct{}

func (nopRecorder) MembershipAction(membership.ActionType, string) {}

func testServer(t *testing.T) *httptest.Server {
	r := newReconciler(t)
	mux := http.NewServeMux()
	mux.Handle("/sync", hooks.SyncHandler(r))
	mux.Handle("/finalize", hooks.FinalizeHandler(r))
	backups := hooks.BackupConfig{AgentImage: "ghcr.io/etcdhook/etcd-hook:latest", Now: func() time.Time { return time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC) }}
	mux.Handle("/backup/sync", hooks.BackupSyncHandler(backups))
	mux.Handle("/backup/finalize", hooks.BackupFinalizeHandler(backups))
	mux.Handle("/backup/customize", hooks.BackupCustomizeHandler())
	mux.Handle("/customize", hooks.CustomizeHandler())
	mux.Handle("/restore/sync", hooks.RestoreSyncHandler(func() time.Time { return time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC) }))
	mux.Handle("/restore/customize", hooks.RestoreCustomizeHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// newReconciler is the real reconciler with a fixed clock and name source,
// and no etcd: golden answers are then byte-for-byte stable.
func newReconciler(t *testing.T) *reconcile.Reconciler {
	return &reconcile.Reconciler{
		Dialer:   noEtcd{t},
		Recorder: nopRecorder{},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:      func() time.Time { return time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC) },
		Random:   bytes.NewReader(bytes.Repeat([]byte{7}, 1<<16)),
	}
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(testenv.Path(t, "test/fixtures/"+name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func post(t *testing.T, url, contentType string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// TestGolden answers each fixture and compares the whole answer with its
// golden file. Run with -update to rewrite them after a deliberate change,
// and review the diff.
func TestGolden(t *testing.T) {
	tests := []struct {
		fixture string
		route   string
		reason  string
		code    int
	}{
		{"new-cluster.json", "/sync", "captured first sync: one seed Pod, both Services, Creating", 200},
		{"three-pending-pods.json", "/sync", "captured: three foreign Pending Pods are kept while etcd cannot be read", 200},
		{"scaled-to-five.json", "/sync", "captured: five Pending Pods, nothing dropped", 200},
		{"invalid-size.json", "/sync", "size -1: HTTP 200, every Pod kept, status names spec.size", 200},
		{"invalid-version.json", "/sync", "unparseable version: no seed is created, status names spec.version", 200},
		{"size-not-a-number.json", "/sync", "a spec that does not decode is an invalid spec, not a bad request", 200},
		{"new-persistent-cluster.json", "/sync", "seed with its PVC", 200},
		{"finalize-deleting.json", "/finalize", "captured finalize: all children dropped, finalized false until they are gone", 200},
		{"finalize-done.json", "/finalize", "no children left: finalized true", 200},
		{"wrong-kind.json", "/sync", "a parent of another kind is refused", 422},
		{"malformed.json", "/sync", "truncated JSON is refused", 400},
		{"backup-new.json", "/backup/sync", "CoreOS one-shot backup, Secret present: the first run's Pod, Progressing", 200},
		{"backup-secret-missing.json", "/backup/sync", "the awsSecret is not there: no run, a condition naming it", 200},
		{"backup-customize.json", "/backup/customize", "the related objects: the awsSecret by name", 200},
		{"new-cluster.json", "/backup/sync", "an EtcdCluster sent to the backup route is refused", 422},
	}
	srv := testServer(t)
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			code, body := post(t, srv.URL+tt.route, "application/json", fixture(t, tt.fixture))
			if code != tt.code {
				t.Errorf("%s: HTTP %d, want %d; body %s", tt.reason, code, tt.code, body)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, body, "", "  "); err != nil {
				t.Fatalf("answer is not JSON: %v: %s", err, body)
			}
			name := strings.TrimSuffix(tt.fixture, ".json")
			if tt.route == "/backup/sync" && !strings.HasPrefix(name, "backup") {
				name = "backup-route-" + name
			}
			golden := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, append(pretty.Bytes(), '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./hooks -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), pretty.String()+"\n"); diff != "" {
				t.Errorf("%s: answer differs from %s (-want +got):\n%s", tt.reason, golden, diff)
			}
		})
	}
}

// TestCapturedRequests decodes and answers every request Metacontroller
// really sent, straight from the shared recordings.
func TestCapturedRequests(t *testing.T) {
	// CI always has shared/ beside the clone: there, a missing recording
	// is a failure, not a reason to test nothing.
	files := testenv.CapturedRequests(t)
	srv := testServer(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			route := "/sync"
			if strings.HasPrefix(filepath.Base(f), "finalize") {
				route = "/finalize"
			}
			code, out := post(t, srv.URL+route, "application/json", body)
			if code != http.StatusOK {
				t.Fatalf("HTTP %d: %s", code, out)
			}
			var resp struct {
				Status   map[string]any   `json:"status"`
				Children []map[string]any `json:"children"`
			}
			if err := json.Unmarshal(out, &resp); err != nil {
				t.Fatal(err)
			}
			if resp.Status == nil || resp.Children == nil {
				t.Errorf("answer lacks status or children: %s", out)
			}
		})
	}
}

func TestTransportErrors(t *testing.T) {
	srv := testServer(t)
	huge := append([]byte(`{"parent":{"metadata":{"annotations":{"x":"`), bytes.Repeat([]byte("a"), hooks.MaxBodyBytes)...)
	tests := []struct {
		name        string
		method      string
		contentType string
		body        []byte
		code        int
		mentions    string
	}{
		{"wrong method", http.MethodGet, "", nil, 405, "POST"},
		{"wrong content type", http.MethodPost, "text/plain", []byte("{}"), 415, "application/json"},
		{"no parent", http.MethodPost, "application/json", []byte(`{"children":{}}`), 422, "no parent"},
		{"parent without namespace", http.MethodPost, "application/json", []byte(`{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","metadata":{"name":"x"},"spec":{"size":1}}}`), 422, "namespace"},
		{"oversized", http.MethodPost, "application/json", huge, 413, "larger than"},
		{"undecodable child", http.MethodPost, "application/json", []byte(`{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","metadata":{"name":"x","namespace":"y"},"spec":{"size":1}},"children":{"Pod.v1":{"p":{"spec":7}}}}`), 400, `children["Pod.v1"]["p"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(context.Background(), tt.method, srv.URL+"/sync", bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body map[string]string
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("error answer is not JSON: %v", err)
			}
			if resp.StatusCode != tt.code || !strings.Contains(body["error"], tt.mentions) {
				t.Errorf("HTTP %d %q, want %d mentioning %q", resp.StatusCode, body["error"], tt.code, tt.mentions)
			}
		})
	}
}
