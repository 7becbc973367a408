package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/reconcile"
	"github.com/etcdhook/etcd-hook/sync"
)

type nopRecorder struct{}

func (nopRecorder) MembershipAction(sync.ActionType, string) {}

// rig is one measured setup: a real etcd cluster, the hook and the echo
// floor behind one HTTP server, and the steady-state request.
type rig struct {
	members int
	server  *httptest.Server
	client  *http.Client
	request []byte
	// etcd is what the hook reads of the cluster in a steady sync.
	etcd etcdclient.Cluster
}

func newRig(tb testing.TB, members int) *rig {
	tb.Helper()
	ec := etcdtest.StartCluster(tb, etcdtest.Options{Size: members})
	pool := etcdclient.NewPool(0)
	tb.Cleanup(pool.Close)
	var names []string
	for _, m := range ec.Members {
		names = append(names, m.Name)
	}
	reconciler := &reconcile.Reconciler{
		Dialer:   etcdtest.NewDialer(pool, ec),
		Recorder: nopRecorder{},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}

	// The steady state carries the status the hook itself writes for the
	// converged cluster, as Metacontroller would send it back.
	first, err := steadyRequest(names, etcdtest.DefaultVersion, v1beta2.ClusterStatus{Phase: v1beta2.PhaseRunning})
	if err != nil {
		tb.Fatal(err)
	}
	o, err := hooks.Decode(first)
	if err != nil {
		tb.Fatal(err)
	}
	d, err := reconciler.Sync(context.Background(), o)
	if err != nil {
		tb.Fatal(err)
	}
	if d.Action != nil || d.Status.Phase != "Running" {
		tb.Fatalf("the benchmark cluster is not steady: action %v, phase %q, reason %q", d.Action, d.Status.Phase, d.Status.Reason)
	}
	request, err := steadyRequest(names, etcdtest.DefaultVersion, d.Status)
	if err != nil {
		tb.Fatal(err)
	}

	var endpoints []string
	for _, name := range names {
		endpoints = append(endpoints, sync.AddressesOf(o.Cluster).ClientURL(name))
	}
	etcd, err := reconciler.Dialer.Cluster(endpoints, nil)
	if err != nil {
		tb.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/sync", hooks.SyncHandler(reconciler))
	mux.Handle("/echo", echoHandler(d))
	r := &rig{members: members, server: httptest.NewServer(mux), request: request, etcd: etcd}
	tb.Cleanup(r.server.Close)
	r.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	// The hook must answer the steady request with no membership step.
	out := r.post(tb, "/sync")
	if !bytes.Contains(out, []byte(`"reason":"Converged"`)) {
		tb.Fatalf("hook answer is not steady: %.400s", out)
	}
	return r
}

// echoHandler is the floor: the hook's transport, decoding into the same
// types, and the hook's own answer for this request encoded again, with no
// etcd and no planning.
func echoHandler(d sync.Decision) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, hooks.MaxBodyBytes))
		if err != nil {
			hooks.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		if _, err := hooks.Decode(body); err != nil {
			hooks.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		out, err := hooks.Encode(d, false)
		if err != nil {
			hooks.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
}

func (r *rig) post(tb testing.TB, path string) []byte {
	resp, err := r.client.Post(r.server.URL+path, "application/json", bytes.NewReader(r.request))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("%s: HTTP %d %v: %.300s", path, resp.StatusCode, err, out)
	}
	return out
}

// timedRead reads the cluster as a steady sync does, on its own.
func (r *rig) timedRead(tb testing.TB) time.Duration {
	start := time.Now()
	if _, err := r.etcd.Membership(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return time.Since(start)
}

// timed posts once and returns the round-trip time.
func (r *rig) timed(tb testing.TB, path string) time.Duration {
	start := time.Now()
	r.post(tb, path)
	return time.Since(start)
}

func (r *rig) String() string {
	return fmt.Sprintf("%d members, %d-byte request", r.members, len(r.request))
}
