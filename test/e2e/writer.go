package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// putTimeout is short so that a put stuck on a member that is going
	// away gives up and the next one can go elsewhere.
	putTimeout = time.Second
	// writePause keeps the writer from competing with six etcd processes
	// and the hook for two cores: the scenarios measure convergence, and a
	// writer at full speed would mostly measure fsync.
	writePause = 10 * time.Millisecond
)

// Writer puts sequential keys into a cluster through its client Service, as
// an application would, and remembers which puts etcd acknowledged.
type Writer struct {
	Prefix string

	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	acked []int
	// revs is the revision etcd acknowledged each put at, by n.
	revs     map[int]int64
	attempts int
	lastErr  error
	// failures are the first few failed puts, for a test's log.
	failures []PutFailure
}

// PutFailure is one put etcd did not acknowledge: when it was sent and why.
type PutFailure struct {
	N    int
	At   time.Time
	Took time.Duration
	Err  error
}

// maxFailures bounds the failed puts a writer remembers.
const maxFailures = 20

// Result is what a writer's run proved.
type Result struct {
	Attempts int // puts sent
	Acked    int // puts etcd acknowledged
	Lost     int // acknowledged puts no longer readable
	// Unacked puts that are readable anyway: timed out on the client after
	// etcd committed them. Not an error, only a sign of disruption.
	AppliedUnacked int
	LostKeys       []string // the first few
}

// StartWriter starts putting <prefix><n> for n = 0, 1, ... until Stop.
func StartWriter(ctx context.Context, endpoint, prefix string) (*Writer, error) {
	cli, err := NewClient(endpoint)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Writer{Prefix: prefix, cli: cli, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx)
	return w, nil
}

// Key is the n-th key. Zero-padded so that a range read returns keys in
// write order.
func (w *Writer) Key(n int) string { return fmt.Sprintf("%s%08d", w.Prefix, n) }

func (w *Writer) run(ctx context.Context) {
	defer close(w.done)
	for n := 0; ctx.Err() == nil; n++ {
		pctx, cancel := context.WithTimeout(ctx, putTimeout)
		sent := time.Now()
		resp, err := w.cli.Put(pctx, w.Key(n), strconv.Itoa(n))
		cancel()
		w.mu.Lock()
		w.attempts++
		if err == nil {
			w.acked = append(w.acked, n)
			if w.revs == nil {
				w.revs = map[int]int64{}
			}
			w.revs[n] = resp.Header.Revision
		} else if ctx.Err() == nil {
			w.lastErr = err
			if len(w.failures) < maxFailures {
				w.failures = append(w.failures, PutFailure{N: n, At: sent, Took: time.Since(sent), Err: err})
			}
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(writePause):
		}
	}
}

// AckedUpTo lists the keys etcd acknowledged at or before revision rev.
func (w *Writer) AckedUpTo(rev int64) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, n := range w.acked {
		if w.revs[n] <= rev {
			out = append(out, w.Key(n))
		}
	}
	return out
}

// AckedAfter lists the keys etcd acknowledged after revision rev.
func (w *Writer) AckedAfter(rev int64) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, n := range w.acked {
		if w.revs[n] > rev {
			out = append(out, w.Key(n))
		}
	}
	return out
}

// HighestRevision is the highest revision etcd acknowledged a put at.
func (w *Writer) HighestRevision() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var highest int64
	for _, rev := range w.revs {
		highest = max(highest, rev)
	}
	return highest
}

// Acked is how many puts were acknowledged so far.
func (w *Writer) Acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// Counts are the puts sent and acknowledged so far: their differences
// across a window tell how many puts failed in it.
func (w *Writer) Counts() (attempts, acked int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.attempts, len(w.acked)
}

// FailuresSince lists the remembered failed puts sent at or after t.
func (w *Writer) FailuresSince(t time.Time) []PutFailure {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []PutFailure
	for _, f := range w.failures {
		if !f.At.Before(t) {
			out = append(out, f)
		}
	}
	return out
}

// WaitAcked waits until n more puts than now are acknowledged, so that a
// scenario's disruption hits a writer that is known to work.
func (w *Writer) WaitAcked(ctx context.Context, n int, timeout time.Duration) error {
	target := w.Acked() + n
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for w.Acked() < target {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			defer w.mu.Unlock()
			return fmt.Errorf("writer: %d of %d puts acknowledged (last error %v): %w", len(w.acked), target, w.lastErr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Stop ends the writer; an in-flight put is cancelled, and then it is not
// counted as acknowledged.
func (w *Writer) Stop() {
	w.cancel()
	<-w.done
	_ = w.cli.Close()
}

// Verify stops the writer and reads its whole prefix back in one
// linearizable range read through the given endpoints: every acknowledged
// put must be there with its value.
func (w *Writer) Verify(ctx context.Context, endpoints []string) (Result, error) {
	w.Stop()
	w.mu.Lock()
	res := Result{Attempts: w.attempts, Acked: len(w.acked)}
	acked := append([]int(nil), w.acked...)
	w.mu.Unlock()

	cli, err := NewClient(endpoints...)
	if err != nil {
		return res, err
	}
	defer cli.Close()
	var resp *clientv3.GetResponse
	// A converged cluster may still be settling a leader change; a few
	// tries keep that from failing the read, and a bound keeps a dead
	// cluster from hanging the test.
	for try := 0; try < 10; try++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err = cli.Get(rctx, w.Prefix, clientv3.WithPrefix())
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return res, fmt.Errorf("read back %s: %w", w.Prefix, err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	ackedSet := map[string]bool{}
	for _, n := range acked {
		k := w.Key(n)
		ackedSet[k] = true
		if v, ok := got[k]; !ok || v != strconv.Itoa(n) {
			res.Lost++
			if len(res.LostKeys) < 10 {
				res.LostKeys = append(res.LostKeys, fmt.Sprintf("%s=%q (present %v)", k, v, ok))
			}
		}
	}
	for k := range got {
		if !ackedSet[k] {
			res.AppliedUnacked++
		}
	}
	if res.Acked == 0 {
		return res, errors.New("writer: no put was acknowledged")
	}
	return res, nil
}
