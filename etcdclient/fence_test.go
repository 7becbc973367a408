package etcdclient_test

import (
	"context"
	"io"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/membership"
)

// TestWriteFence raises the hook's write fence on real members and checks
// what a final backup relies on: every write that goes through raft is
// refused, reads and snapshots are served, every member reports the
// fence, raising and lifting are idempotent, and writes are accepted again
// once it is lifted.
func TestWriteFence(t *testing.T) {
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3, Version: version})
			cli := client(t, ec)
			c := dial(t, ec.Endpoints())
			ctx := context.Background()
			put, err := cli.Put(ctx, "before", "kept")
			if err != nil {
				t.Fatal(err)
			}
			leader := leaderOf(readMembership(t, c))

			for attempt := 1; attempt <= 2; attempt++ {
				members, err := c.Apply(ctx, membership.Action{Type: membership.ActionRaiseFence, LeaderEndpoint: endpointOf(leader)})
				if err != nil || len(members) != 3 {
					t.Fatalf("raise the fence, attempt %d (raising it again changes nothing): %d members, %v", attempt, len(members), err)
				}
			}
			ms := waitWholeMembership(t, c, "report the fence", func(ms *membership.Membership) bool {
				return membership.Fenced(ms.Alarms())
			})
			if got := membership.WithoutFence(ms.Alarms()); len(got) != 0 {
				t.Errorf("alarms besides the fence: %+v", got)
			}

			refused := map[string]func(context.Context) error{
				"put":    func(ctx context.Context) error { _, err := cli.Put(ctx, "after", "x"); return err },
				"delete": func(ctx context.Context) error { _, err := cli.Delete(ctx, "before"); return err },
				"txn": func(ctx context.Context) error {
					_, err := cli.Txn(ctx).Then(clientv3.OpPut("txn", "x")).Commit()
					return err
				},
				"lease grant": func(ctx context.Context) error { _, err := cli.Grant(ctx, 60); return err },
				"compaction":  func(ctx context.Context) error { _, err := cli.Compact(ctx, put.Header.Revision); return err },
			}
			for what, call := range refused {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := call(cctx)
				cancel()
				// etcd's own refusal, not a timeout or a lost connection.
				if err == nil || rpctypes.ErrorDesc(err) != rpctypes.ErrCorrupt.Error() {
					t.Errorf("%s behind the fence: %v, want etcd's %q", what, err, rpctypes.ErrCorrupt.Error())
				}
			}
			for _, ep := range ec.Endpoints() {
				one, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				resp, err := one.Get(ctx, "before")
				if err != nil || len(resp.Kvs) != 1 || resp.Header.Revision != put.Header.Revision {
					t.Errorf("%s: a linearizable read behind the fence: %v, %+v (want revision %d: nothing written since)", ep, err, resp, put.Header.Revision)
				}
				one.Close()
			}
			rc, err := cli.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil || n == 0 {
				t.Errorf("snapshot behind the fence: %d bytes, %v", n, err)
			}

			for attempt := 1; attempt <= 2; attempt++ {
				if _, err := c.Apply(ctx, membership.Action{Type: membership.ActionLiftFence, LeaderEndpoint: endpointOf(leader)}); err != nil {
					t.Fatalf("lift the fence, attempt %d (lifting it again changes nothing): %v", attempt, err)
				}
			}
			waitWholeMembership(t, c, "drop the fence", func(ms *membership.Membership) bool { return len(ms.Alarms()) == 0 })
			if _, err := cli.Put(ctx, "after", "accepted"); err != nil {
				t.Errorf("put once the fence is lifted: %v", err)
			}
		})
	}
}
