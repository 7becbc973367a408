package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// TestArchiveRPOReport prints the continuous backup's table of
// BENCHMARKS.md: the archiver (bin/etcd-hook archive, a process of its
// own, on a volume) behind writers at 1,000 and 5,000 puts/s of 1 KiB
// values, with a delta interval of 5 s. The stored lag of a write is
// from its acknowledgement to the first moment the archiver's status says
// its revision is stored, polled every 20 ms: the RPO a total loss at that
// moment would have cost. Its CPU and peak RSS come from /proc. Run with
// BENCH_REPORT=1 (make bench-archive).
func TestArchiveRPOReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench) to measure")
	}
	hookBin, err := testenv.LookBinary(testenv.Hook)
	if err != nil {
		t.Fatalf("%v (make build etcd-bins)", err)
	}
	seconds := envInt("BENCH_ARCHIVE_SECONDS", 20)
	lines := []string{
		"| puts/s asked | puts/s made | writes | stored lag p50 | p99 | max | deltas | archiver CPU | archiver peak RSS |",
		"|---|---|---|---|---|---|---|---|---|",
	}
	for _, rate := range []int{1000, 5000} {
		// A cluster per rate, so that the peak RSS is this rate's.
		ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: etcdtest.Version37, ExtraArgs: []string{"--unsafe-no-fsync"}})
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		status := fmt.Sprintf("127.0.0.1:%d", port)
		cmd := exec.Command(hookBin, "archive", "--endpoints="+ec.Endpoints()[0], "--dir="+t.TempDir(), "--file=etcd.backup",
			"--delta-interval=5s", "--status-addr="+status, "--spool-dir="+t.TempDir())
		cmd.Stderr = os.Stderr
		if os.Getenv("BENCH_ARCHIVE_LOG") == "" {
			cmd.Stderr = nil
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
		t.Cleanup(stop)
		waitArchiving(t, status)

		cpu0, _ := readProcCPU(cmd.Process.Pid)
		acks, stored := drive(t, ec.Endpoints()[0], status, rate, time.Duration(seconds)*time.Second)
		cpu1, _ := readProcCPU(cmd.Process.Pid)
		st, err := readProcStatus(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		stop()

		var lags []time.Duration
		for _, a := range acks {
			i, found := slices.BinarySearchFunc(stored, a.rev, func(s storedAt, rev int64) int { return int(s.rev - rev) })
			if !found && i == len(stored) {
				t.Fatalf("revision %d was never stored", a.rev)
			}
			lags = append(lags, max(0, stored[i].at.Sub(a.at)))
		}
		slices.Sort(lags)
		made := float64(len(acks)) / float64(seconds)
		lines = append(lines, fmt.Sprintf("| %d | %.0f | %d | %s | %s | %s | %d | %.1f%% of a core | %.1f MiB |",
			rate, made, len(acks), lags[len(lags)/2].Round(10*time.Millisecond), lags[len(lags)*99/100].Round(10*time.Millisecond),
			lags[len(lags)-1].Round(10*time.Millisecond), len(stored), 100*float64(cpu1-cpu0)/float64(time.Duration(seconds)*time.Second),
			float64(st.peakRSS)/(1<<20)))
	}
	out := strings.Join(lines, "\n") + "\n"
	t.Logf("continuous backup:\n%s", out)
	if path := os.Getenv("BENCH_ARCHIVE_FILE"); path != "" {
		if err := writeFromModuleRoot(path, out); err != nil {
			t.Fatal(err)
		}
	}
}

type ack struct {
	rev int64
	at  time.Time
}

// storedAt is the first moment the status said rev was stored.
type storedAt struct {
	rev int64
	at  time.Time
}

func archiveStatus(addr string) (report.ArchiveStatus, error) {
	var st report.ArchiveStatus
	resp, err := http.Get("http://" + addr + report.ArchiveStatusPath)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func waitArchiving(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err := archiveStatus(addr); err == nil && st.ChainStart > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the archiver did not start a chain in 30 s")
		}
	}
}

// drive puts 1 KiB values at rate for d from 8 writers, then waits until
// the last is stored; it returns every acknowledgement and each change of
// the stored revision the status showed.
func drive(t *testing.T, endpoint, status string, rate int, d time.Duration) ([]ack, []storedAt) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	value := strings.Repeat("v", 1024)
	var mu sync.Mutex
	var acks []ack
	var stored []storedAt
	done := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		var last int64
		for {
			st, err := archiveStatus(status)
			if err == nil && st.LastDeltaRevision > last {
				last = st.LastDeltaRevision
				mu.Lock()
				stored = append(stored, storedAt{last, time.Now()})
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	const writers = 8
	interval := time.Duration(writers) * time.Second / time.Duration(rate)
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := time.Now().Add(time.Duration(w) * interval / writers)
			for i := 0; time.Now().Before(end); i++ {
				time.Sleep(time.Until(next))
				next = next.Add(interval)
				resp, err := cli.Put(context.Background(), "/bench/"+strconv.Itoa(w)+"/"+strconv.Itoa(i%1000), value)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acks = append(acks, ack{resp.Header.Revision, time.Now()})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var top int64
	for _, a := range acks {
		top = max(top, a.rev)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(stored)
		ok := n > 0 && stored[n-1].rev >= top
		mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d not stored 30 s after the last write", top)
		}
	}
	close(done)
	<-polled
	return acks, stored
}
