package etcdclient_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
)

// TestConnectionCostReport measures what a kept connection costs the hook:
// heap and goroutines, each connection to a real etcd, up and used once.
// The figure behind DefaultMaxIdleConns. It runs only when asked
// (BENCH_REPORT=1, set by make bench), since it measures rather than
// checks.
func TestConnectionCostReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench) to measure")
	}
	ec := etcdtest.StartCluster(t, etcdtest.Options{})
	const n = 300
	pool := etcdclient.NewPool(n)
	t.Cleanup(pool.Close)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	for i := range n {
		// One member, many endpoints: the cache keys connections by
		// endpoint, and a path makes each its own.
		c, err := pool.Cluster([]string{fmt.Sprintf("%s/%d", ec.Members[0].ClientURL, i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Membership(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("per kept connection, %d connections: heap %.1f KiB, stacks %.1f KiB, goroutines %.1f",
		n, float64(after.HeapInuse-before.HeapInuse)/n/1024, float64(after.StackInuse-before.StackInuse)/n/1024,
		float64(runtime.NumGoroutine()-goroutines)/n)
}
