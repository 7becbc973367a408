package bench

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
)

func TestZZProbe(t *testing.T) {
	for _, n := range []int{1, 3} {
		r := newRig(t, n)
		ec := etcdtest.StartCluster(t, etcdtest.Options{Size: n})
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ec.Members[0].ClientURL}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		m := pb.NewMaintenanceClient(cli.ActiveConnection())
		measure := func(name string, f func()) {
			for range 50 {
				f()
			}
			var d []time.Duration
			for range 1000 {
				s := time.Now()
				f()
				d = append(d, time.Since(s))
			}
			t.Logf("n=%d %-14s p50 %v p99 %v", n, name, pct(d, 50), pct(d, 99))
		}
		measure("status", func() { _, _ = m.Status(ctx, &pb.StatusRequest{}) })
		measure("list-serial", func() { _, _ = cli.MemberList(ctx, clientv3.WithSerializable()) })
		measure("list-lin", func() { _, _ = cli.MemberList(ctx) })
		measure("echo", func() { r.post(t, "/echo") })
		measure("sync", func() { r.post(t, "/sync") })
		cli.Close()
	}
}
