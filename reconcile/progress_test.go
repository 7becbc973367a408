package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
)

// TestProgressIsLogged: a sync whose answer changes what the Progressing
// condition says logs it, once; a sync that observes that status and
// nothing new logs nothing, so a steady cluster's resyncs stay quiet.
func TestProgressIsLogged(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 1})
	r, _ := newReconciler(t, ec, 3)
	var buf bytes.Buffer
	r.Logger = slog.New(slog.NewJSONHandler(&buf, nil))

	// The first sync adds a learner; the second, with that status
	// observed, waits for the learner's Pod; the third sees the same again.
	var reasons []string
	status := observedFor(ec, 3).Cluster.Status
	for sync := 1; sync <= 3; sync++ {
		o := observedFor(ec, 3)
		o.Cluster.Status = status
		d, err := r.Sync(context.Background(), o, nil)
		if err != nil {
			t.Fatal(err)
		}
		status = d.Status
		lines := progressLines(t, &buf)
		buf.Reset()
		for _, l := range lines {
			reasons = append(reasons, fmt.Sprintf("sync %d: %s %s", sync, l["msg"], l["reason"]))
		}
	}
	want := []string{"sync 1: progressing ScalingUp", "sync 2: progressing WaitingForMember"}
	if diff := cmp.Diff(want, reasons); diff != "" {
		t.Errorf("progress logged (-want +got):\n%s", diff)
	}
}

func progressLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "progressing" || rec["msg"] == "converged" {
			delete(rec, "time")
			out = append(out, rec)
		}
	}
	return out
}
