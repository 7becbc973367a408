package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/reconcile"
)

// blackhole is the URL of an etcd that accepts connections and never
// answers (see serveBlackhole).
func blackhole(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serveBlackhole(l))
	return "http://" + l.Addr().String()
}

// TestUnreachableIsolationReport measures a healthy cluster's sync latency
// alone, and again while five clusters whose etcd never answers are synced
// by five clients, each as soon as the hook's answer asks (resyncAfter), as
// Metacontroller's workers would. Run with BENCH_REPORT=1 (make bench).
func TestUnreachableIsolationReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench) to measure")
	}
	samples := envInt("BENCH_SAMPLES", 2000) / 2
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	pool := etcdclient.NewPool(0)
	t.Cleanup(pool.Close)
	dialer := etcdtest.NewDialer(pool, ec)
	hole := blackhole(t)
	var healthyNames []string
	for _, m := range ec.Members {
		healthyNames = append(healthyNames, m.Name)
	}
	reconciler := &reconcile.Reconciler{Dialer: dialer, Recorder: nopRecorder{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptest.NewServer(hooks.SyncHandler(reconciler))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

	running := v1beta2.ClusterStatus{Phase: v1beta2.PhaseRunning, Size: 3}
	healthy, err := clusterRequest("healthy", "uid-healthy", healthyNames, etcdtest.DefaultVersion, running)
	if err != nil {
		t.Fatal(err)
	}
	var unreachable [][]byte
	for i := range 5 {
		names := []string{fmt.Sprintf("dead%d-a", i), fmt.Sprintf("dead%d-b", i), fmt.Sprintf("dead%d-c", i)}
		for _, n := range names {
			dialer.ByPod[n] = hole
		}
		req, err := clusterRequest(fmt.Sprintf("dead%d", i), fmt.Sprintf("uid-dead-%d", i), names, etcdtest.DefaultVersion, running)
		if err != nil {
			t.Fatal(err)
		}
		unreachable = append(unreachable, req)
	}

	// post syncs once and returns how long it took and how soon the hook
	// asked to be synced again.
	post := func(body []byte) (took, resyncAfter time.Duration) {
		start := time.Now()
		resp, err := client.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0, 0
		}
		var answer struct {
			ResyncAfterSeconds float64 `json:"resyncAfterSeconds"`
		}
		err = json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("HTTP %d: %v", resp.StatusCode, err)
		}
		return time.Since(start), time.Duration(answer.ResyncAfterSeconds * float64(time.Second))
	}
	measure := func() []time.Duration {
		var out []time.Duration
		for range samples {
			took, _ := post(healthy)
			out = append(out, took)
		}
		return out
	}
	for range 50 {
		post(healthy)
	}
	alone := measure()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var deadSyncs []time.Duration
	var mu sync.Mutex
	for _, req := range unreachable {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				took, resyncAfter := post(req)
				mu.Lock()
				deadSyncs = append(deadSyncs, took)
				mu.Unlock()
				// As Metacontroller does: the next sync when the hook asks.
				select {
				case <-ctx.Done():
				case <-time.After(resyncAfter):
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	loaded := measure()
	cancel()
	wg.Wait()

	lines := []string{
		"| healthy cluster's syncs | p50 | p99 | max |",
		"|---|---|---|---|",
		fmt.Sprintf("| alone | %s | %s | %s |", us(pct(alone, 50)), us(pct(alone, 99)), us(pct(alone, 100))),
		fmt.Sprintf("| with 5 unreachable clusters syncing | %s | %s | %s |", us(pct(loaded, 50)), us(pct(loaded, 99)), us(pct(loaded, 100))),
		fmt.Sprintf("| ratio | %.2f | %.2f | |", ratio(pct(loaded, 50), pct(alone, 50)), ratio(pct(loaded, 99), pct(alone, 99))),
		fmt.Sprintf("| an unreachable cluster's sync (%d) | %s | %s | %s |", len(deadSyncs), us(pct(deadSyncs, 50)), us(pct(deadSyncs, 99)), us(pct(deadSyncs, 100))),
	}
	report := strings.Join(lines, "\n") + "\n"
	t.Logf("%d samples each, %d cores:\n%s", samples, runtime.NumCPU(), report)
	if path := os.Getenv("BENCH_ISOLATION_FILE"); path != "" {
		if err := writeFromModuleRoot(path, report); err != nil {
			t.Fatal(err)
		}
	}
}
