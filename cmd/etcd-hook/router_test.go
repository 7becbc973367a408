package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
	"github.com/etcdhook/etcd-hook/reconcile"
)

type staticSyncer struct{}

func (staticSyncer) Prepare(context.Context, *etcdcluster.Observed) *reconcile.EarlyRead { return nil }

func (staticSyncer) Sync(context.Context, *etcdcluster.Observed, *reconcile.EarlyRead) (etcdcluster.Decision, error) {
	return etcdcluster.Decision{}, nil
}

func TestRoutes(t *testing.T) {
	registry := prometheus.NewRegistry()
	m := newMetrics(registry)
	ready := &readiness{}
	ready.set(true)
	srv := httptest.NewServer(newRouter(staticSyncer{}, hooks.BackupConfig{AgentImage: "test"}, m, registry, slog.New(slog.NewTextHandler(io.Discard, nil)), ready, nil))
	defer srv.Close()

	fixture, err := os.ReadFile(testenv.Path(t, "test/fixtures/new-cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path, body string
		code               int
		mentions           string
	}{
		{"POST", "/sync", string(fixture), 200, `"children":[]`},
		{"POST", "/finalize", string(fixture), 200, `"finalized":false`},
		{"GET", "/sync", "", 405, `"error"`},
		{"GET", "/healthz", "", 200, "ok"},
		{"GET", "/readyz", "", 200, "ok"},
		{"GET", "/nowhere", "", 404, `"error"`},
		{"GET", "/metrics", "", 200, `etcd_hook_request_duration_seconds_bucket{code="200",route="/sync"`},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.mentions) {
			t.Errorf("%s %s: HTTP %d %.200q; want %d mentioning %q", tt.method, tt.path, resp.StatusCode, body, tt.code, tt.mentions)
		}
	}

	ready.set(false)
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while shutting down: HTTP %d, want 503", resp.StatusCode)
	}
}

func TestFlags(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil || cfg.addr != ":8080" {
		t.Errorf("default addr = %q (%v), want :8080", cfg.addr, err)
	}
	cfg, err = parseFlags([]string{"--addr", "127.0.0.1:9999", "--log-level", "debug"})
	if err != nil || cfg.addr != "127.0.0.1:9999" || cfg.logLevel != slog.LevelDebug {
		t.Errorf("parsed %+v (%v)", cfg, err)
	}
	if _, err := parseFlags([]string{"--bogus"}); err == nil {
		t.Error("an unknown flag must be an error")
	}
}
