package reconcile_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
	"github.com/etcdhook/etcd-hook/reconcile"
)

// countingDialer counts the reads a sync makes through the real adapter.
type countingDialer struct {
	etcdclient.Dialer
	mu     sync.Mutex
	counts map[string]int
}

func (d *countingDialer) Cluster(endpoints []string, creds *etcdclient.ClientTLS) (etcdclient.Cluster, error) {
	c, err := d.Dialer.Cluster(endpoints, creds)
	if err != nil {
		return nil, err
	}
	return countingCluster{c, d}, nil
}

func (d *countingDialer) count(what string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts[what]++
}

func (d *countingDialer) reads() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.counts
	d.counts = map[string]int{}
	return out
}

type countingCluster struct {
	etcdclient.Cluster
	d *countingDialer
}

func (c countingCluster) Membership(ctx context.Context) (*membership.Membership, error) {
	c.d.count("local")
	return c.Cluster.Membership(ctx)
}

func (c countingCluster) Confirm(ctx context.Context) (*membership.Membership, error) {
	c.d.count("confirmed")
	return c.Cluster.Confirm(ctx)
}

func countingReconciler(t *testing.T, ec *etcdtest.Cluster) (*reconcile.Reconciler, *countingDialer) {
	pool := etcdclient.NewPool(0)
	t.Cleanup(pool.Close)
	d := &countingDialer{Dialer: etcdtest.NewDialer(pool, ec), counts: map[string]int{}}
	return &reconcile.Reconciler{
		Dialer:   d,
		Recorder: &countingRecorder{},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, d
}

// onSpecImage gives every member Pod the container the spec asks for.
func onSpecImage(o *etcdcluster.Observed) *etcdcluster.Observed {
	image := o.Cluster.Spec.WithDefaults().Image()
	for _, pod := range o.Pods {
		pod.Spec.Containers = []corev1.Container{{Name: "etcd", Image: image}}
	}
	return o
}

// steadyObserved is a converged cluster as Metacontroller sends it back:
// with the status the hook wrote for it.
func steadyObserved(t *testing.T, r *reconcile.Reconciler, ec *etcdtest.Cluster) *etcdcluster.Observed {
	t.Helper()
	o := onSpecImage(observedFor(ec, len(ec.Members)))
	d, err := r.Sync(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Action != nil || !d.Settled(o) {
		t.Fatalf("cluster not steady: action %v, status %+v", d.Action, d.Status)
	}
	o = onSpecImage(observedFor(ec, len(ec.Members)))
	o.Cluster.Status = d.Status
	return o
}

func TestReadsPerSync(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	r, dialer := countingReconciler(t, ec)
	steady := steadyObserved(t, r, ec)
	dialer.reads()

	tests := []struct {
		name    string
		reason  string
		observe func() *etcdcluster.Observed
		prepare bool
		want    map[string]int
	}{{
		name:    "steady",
		reason:  "a sync that changes nothing rests on the local read alone",
		observe: func() *etcdcluster.Observed { return steady },
		want:    map[string]int{"local": 1},
	}, {
		name:    "steady, prepared",
		reason:  "the read Prepare started is the sync's read",
		observe: func() *etcdcluster.Observed { return steady },
		prepare: true,
		want:    map[string]int{"local": 1},
	}, {
		name:   "prepared for other members",
		reason: "a read begun for the members the status lists is dropped when the running Pods differ",
		observe: func() *etcdcluster.Observed {
			o := onSpecImage(observedFor(ec, 3))
			o.Cluster.Status = steady.Cluster.Status
			o.Cluster.Status.Members.Ready = []string{ec.Members[0].Name}
			return o
		},
		prepare: true,
		want:    map[string]int{"local": 2},
	}, {
		name:   "a change to make",
		reason: "a change is decided on the list read through the quorum",
		observe: func() *etcdcluster.Observed {
			o := onSpecImage(observedFor(ec, 3))
			o.Cluster.Spec.Size = 4
			return o
		},
		want: map[string]int{"local": 1, "confirmed": 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.observe()
			ctx := context.Background()
			var early *reconcile.EarlyRead
			if tt.prepare {
				early = r.Prepare(ctx, o)
			}
			if _, err := r.Sync(ctx, o, early); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, dialer.reads()); diff != "" {
				t.Errorf("%s: reads (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}
