package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
	"github.com/etcdhook/etcd-hook/reconcile"
)

type countingRecorder struct{ actions []string }

func (r *countingRecorder) MembershipAction(a membership.ActionType, result string) {
	r.actions = append(r.actions, string(a)+":"+result)
}

func newReconciler(t *testing.T, ec *etcdtest.Cluster, suffix byte) (*reconcile.Reconciler, *countingRecorder) {
	pool := etcdclient.NewPool(0)
	t.Cleanup(pool.Close)
	rec := &countingRecorder{}
	return &reconcile.Reconciler{
		Dialer:   etcdtest.NewDialer(pool, ec),
		Recorder: rec,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Random:   repeatReader(suffix),
	}, rec
}

// readyMemberPod is a running, ready Pod as Metacontroller reports it.
func readyMemberPod(name string) *corev1.Pod {
	applied, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name}})
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: map[string]string{plan.LastAppliedAnnotation: string(applied)}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
}

func observedFor(ec *etcdtest.Cluster, size int) *etcdcluster.Observed {
	o := &etcdcluster.Observed{
		Cluster: &v1beta2.EtcdCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns", UID: "uid-1"},
			Spec:       v1beta2.ClusterSpec{Size: size, Version: ec.Version},
			Status:     v1beta2.ClusterStatus{Phase: v1beta2.PhaseRunning},
		},
		Pods: map[string]*corev1.Pod{},
	}
	for _, m := range ec.Members {
		o.Pods[m.Name] = readyMemberPod(m.Name)
	}
	return o
}

func memberCount(t *testing.T, ec *etcdtest.Cluster) (total, unstarted int) {
	t.Helper()
	return memberCountAt(t, ec.Endpoints())
}

func memberCountAt(t *testing.T, endpoints []string) (total, unstarted int) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.Members {
		if m.Name == "" {
			unstarted++
		}
	}
	return len(resp.Members), unstarted
}

func pods(d etcdcluster.Decision) []string {
	var out []string
	for _, c := range d.Children {
		if c.Kind == plan.KindPod {
			out = append(out, c.Name)
		}
	}
	return out
}

// TestGrowSurvivesHookRestart: a sync adds a learner and answers with its
// Pod; a fresh reconciler (a restarted hook, with no memory) syncing the
// same observation adds nothing more and renders the same Pod.
func TestGrowSurvivesHookRestart(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 1})
	r, rec := newReconciler(t, ec, 3)
	d, err := r.Sync(context.Background(), observedFor(ec, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"add:ok"}, rec.actions); diff != "" {
		t.Fatalf("actions (-want +got):\n%s", diff)
	}
	if total, unstarted := memberCount(t, ec); total != 2 || unstarted != 1 {
		t.Fatalf("etcd has %d members, %d unstarted; want 2 and 1", total, unstarted)
	}
	newPod := "demo-" + etcdcluster.RandomSuffix(bytes.Repeat([]byte{3}, 5))
	want := []string{newPod, ec.Members[0].Name} // sorted by name
	if diff := cmp.Diff(want, pods(d)); diff != "" {
		t.Fatalf("Pods in the answer (-want +got):\n%s", diff)
	}

	restarted, rec2 := newReconciler(t, ec, 9)
	d2, err := restarted.Sync(context.Background(), observedFor(ec, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec2.actions) != 0 {
		t.Errorf("restarted hook made %v; an unstarted member must block every other change", rec2.actions)
	}
	if diff := cmp.Diff(want, pods(d2)); diff != "" {
		t.Errorf("restarted hook's Pods (-want +got):\n%s", diff)
	}
	if total, _ := memberCount(t, ec); total != 2 {
		t.Errorf("etcd has %d members after the restarted sync, want 2", total)
	}
}

func TestShrinkRemovesBeforeDroppingPod(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	r, rec := newReconciler(t, ec, 3)
	// etcd refuses a removal until its peers have been connected for its
	// health interval; a real hook simply retries on its next sync.
	var d etcdcluster.Decision
	deadline := time.Now().Add(15 * time.Second)
	for len(rec.actions) == 0 || rec.actions[len(rec.actions)-1] != "remove:ok" {
		if time.Now().After(deadline) {
			t.Fatalf("no successful removal; actions %v", rec.actions)
		}
		var err error
		if d, err = r.Sync(context.Background(), observedFor(ec, 2), nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	var remaining []string
	for _, m := range ec.Members {
		for _, p := range pods(d) {
			if p == m.Name {
				remaining = append(remaining, m.ClientURL)
			}
		}
	}
	if total, _ := memberCountAt(t, remaining); total != 2 {
		t.Fatalf("etcd has %d members, want 2", total)
	}
	if got := len(pods(d)); got != 2 {
		t.Errorf("answer has %d Pods %v, want the removed member's Pod dropped", got, pods(d))
	}
	if d.Status.Size != 2 {
		t.Errorf("status.size = %d, want 2", d.Status.Size)
	}
}

// repeatReader is a random source that always draws the same byte, so the
// new member's name is known to the test.
type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}
