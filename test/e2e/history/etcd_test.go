package history

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
)

func dialPlain(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
}

// On real etcd, with a member killed and restarted under the traffic: the
// history is linearizable, the watch saw every change in order and agrees
// with a replay from the store, and the members agree on HashKV.
func TestTrafficOnRealEtcd(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	ctx := context.Background()
	eps := ec.Endpoints()
	watcher, err := dialPlain(eps[0])
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	start, err := watcher.Get(ctx, "/history/start")
	if err != nil {
		t.Fatal(err)
	}
	from := start.Header.Revision + 1
	w := StartWatch(ctx, watcher, "/h/", from)
	tr, err := StartTraffic(ctx, TrafficConfig{Prefix: "/h/", Endpoints: []string{eps[0], eps[1], eps[2], eps[1]}, Dial: dialPlain, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	ec.Kill(2)
	time.Sleep(time.Second)
	ec.Start(2)
	time.Sleep(1500 * time.Millisecond)
	ops := tr.Stop()
	recorded, failed := tr.Counts()
	changes := Changes(ops)
	if len(changes) < 20 {
		t.Fatalf("only %d acknowledged changes in %d operations: the traffic did not run", len(changes), len(ops))
	}
	var last int64
	for _, c := range changes {
		last = max(last, c.Output.Revision)
	}
	if err := w.WaitFor(ctx, last, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	events, reopened := w.Stop()
	v := Check(ops, time.Minute, t.TempDir())
	t.Logf("%d operations recorded (%d failed, %d of unknown outcome), %d changes, %d events, watch reopened %d times: %s",
		recorded, failed, v.Unknown, len(changes), len(events), reopened, v.Result)
	if err := v.Err(); err != nil {
		t.Error(err)
	}
	if err := CheckEvents(events, from, changes); err != nil {
		t.Error(err)
	}
	replay, compacted, err := Replay(ctx, watcher, "/h/", from, events[len(events)-1].Revision)
	if err != nil || compacted != 0 {
		t.Fatalf("replay: %v (compacted at %d)", err, compacted)
	}
	if err := CheckReplay(events, replay); err != nil {
		t.Error(err)
	}
	if err := Agreement(ctx, dialPlain, eps, 10*time.Second); err != nil {
		t.Error(err)
	}
}
