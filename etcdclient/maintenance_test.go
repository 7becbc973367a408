package etcdclient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/membership"
)

// These tests run the housekeeping actions against real members: a real
// NOSPACE alarm from a tiny quota, a real compaction, real
// defragmentations, and the alarm disarmed.

const tinyQuota = 4 << 20

func client(t *testing.T, ec *etcdtest.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// fillUntilNoSpace writes 100 KiB values until etcd refuses one for lack
// of space, and returns how many it took.
func fillUntilNoSpace(t *testing.T, cli *clientv3.Client, prefix string) int {
	t.Helper()
	value := strings.Repeat("x", 100<<10)
	for i := 0; i < 1000; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("%s%04d", prefix, i), value)
		cancel()
		if errors.Is(err, rpctypes.ErrNoSpace) || rpctypes.ErrorDesc(err) == rpctypes.ErrNoSpace.Error() {
			return i
		}
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	t.Fatal("1000 puts of 100 KiB never hit the quota")
	return 0
}

func endpointOf(m membership.Member) string { return m.ClientURLs[0] }

func leaderOf(ms *membership.Membership) membership.Member {
	for _, m := range ms.Members {
		if m.ID == ms.LeaderID {
			return m
		}
	}
	return membership.Member{}
}

// waitMembership reads until every member satisfies ok, or fails.
//
// A member busy with maintenance (a defragmentation holds its backend)
// may not answer at all for a while: a read that fails is tried again
// until the deadline, and only the last failure fails the test.
func waitMembership(t *testing.T, c etcdclient.Cluster, what string, ok func(membership.Member) bool) *membership.Membership {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ms, err := tryMembership(c)
		if err == nil && !slices.ContainsFunc(ms.Members, func(m membership.Member) bool { return !ok(m) }) {
			return ms
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("members never %s: the last read failed: %v", what, err)
			}
			t.Fatalf("members never %s: %+v", what, ms.Members)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tryMembership is readMembership that returns its error.
func tryMembership(c etcdclient.Cluster) (*membership.Membership, error) {
	if _, err := c.Membership(context.Background()); err != nil {
		return nil, err
	}
	return c.Confirm(context.Background())
}

// waitWholeMembership is waitMembership for a condition on the members
// together.
func waitWholeMembership(t *testing.T, c etcdclient.Cluster, what string, ok func(*membership.Membership) bool) *membership.Membership {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ms, err := tryMembership(c)
		if err == nil && ok(ms) {
			return ms
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("members never %s: the last read failed: %v", what, err)
			}
			t.Fatalf("members never %s: %+v", what, ms.Members)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestNoSpaceRecovery(t *testing.T) {
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3, Version: version, ExtraArgs: []string{fmt.Sprintf("--quota-backend-bytes=%d", tinyQuota)}})
			cli := client(t, ec)
			c := dial(t, ec.Endpoints())
			n := fillUntilNoSpace(t, cli, "fill/")

			// Each member lists the alarm once it has applied it from the
			// log: a follower may be a moment behind the member that
			// refused the put, and a second member's alarm may still be on
			// its way when the first is listed everywhere.
			ms := waitWholeMembership(t, c, "list every alarm", func(ms *membership.Membership) bool {
				n := len(ms.Alarms())
				return n > 0 && !slices.ContainsFunc(ms.Members, func(m membership.Member) bool { return len(m.Errors) != n })
			})
			leader := leaderOf(ms)
			alarms := ms.Alarms()
			// Each member that applies the write over quota raises the alarm
			// for itself unless it has seen another's: one to three alarms.
			if len(alarms) == 0 || slices.ContainsFunc(alarms, func(a membership.Alarm) bool {
				return a.Type != membership.AlarmNoSpace || !slices.ContainsFunc(ms.Members, func(m membership.Member) bool { return m.ID == a.MemberID })
			}) {
				t.Fatalf("after %d puts, want NOSPACE alarms of members, got %+v (errors %q)", n, alarms, ms.Members[0].Errors)
			}
			for _, m := range ms.Members {
				if len(m.Errors) != len(alarms) {
					t.Errorf("member %s: every member lists the cluster's alarms %+v, got %q", m.Name, alarms, m.Errors)
				}
				if m.Revision == 0 || m.RaftAppliedIndex == 0 {
					t.Errorf("member %s: revision %d, applied index %d: both come from Status", m.Name, m.Revision, m.RaftAppliedIndex)
				}
			}
			before := map[string]int64{}
			for _, m := range ms.Members {
				before[m.Name] = m.DBSize
			}

			// Deleting is allowed under NOSPACE; it frees nothing until the
			// history is compacted and each member defragmented.
			del, err := cli.Delete(context.Background(), "fill/", clientv3.WithPrefix())
			// The put that raised the alarm may have been applied all the
			// same: etcd applies it, then answers NOSPACE.
			if err != nil || (del.Deleted != int64(n) && del.Deleted != int64(n+1)) {
				t.Fatalf("delete under NOSPACE: deleted %v of %d, %v", del, n, err)
			}
			ms = readMembership(t, c)
			revision := int64(0)
			for _, m := range ms.Members {
				revision = max(revision, m.Revision)
			}
			compact := membership.Action{Type: membership.ActionCompact, Revision: revision, LeaderEndpoint: endpointOf(leader)}
			for attempt := 1; attempt <= 2; attempt++ {
				members, err := c.Apply(context.Background(), compact)
				if err != nil {
					t.Fatalf("compact, attempt %d (a retry finds it done): %v", attempt, err)
				}
				if len(members) != 3 {
					t.Errorf("compact returns the unchanged member list, got %d members", len(members))
				}
			}
			// etcd counts the pages the compaction freed as in use until
			// the member's next write, which NOSPACE refuses: the sizes
			// may not move. Only the defragmentations show what is left.
			ms = readMembership(t, c)
			for _, m := range ms.Members {
				t.Logf("%s: member %s after compaction: %d bytes, %d in use", version, m.Name, m.DBSize, m.DBSizeInUse)
			}

			// Followers first, the leader last, as the planner orders them.
			slices.SortStableFunc(ms.Members, func(a, b membership.Member) int {
				switch {
				case a.ID == ms.LeaderID:
					return 1
				case b.ID == ms.LeaderID:
					return -1
				}
				return 0
			})
			for _, m := range ms.Members {
				start := time.Now()
				members, err := c.Apply(context.Background(), membership.Action{Type: membership.ActionDefragment, Name: m.Name, MemberID: m.ID, Endpoint: endpointOf(m), LeaderEndpoint: endpointOf(leader)})
				if err != nil || len(members) != 3 {
					t.Fatalf("defragment %s: %d members, %v", m.Name, len(members), err)
				}
				t.Logf("%s: defragmented %s in %v", version, m.Name, time.Since(start).Round(time.Millisecond))
			}
			ms = waitMembership(t, c, "show their files shrunk", func(m membership.Member) bool { return m.DBSize < tinyQuota/100*80 })
			for _, m := range ms.Members {
				t.Logf("%s: member %s: database file %d bytes before, %d after (%d in use)", version, m.Name, before[m.Name], m.DBSize, m.DBSizeInUse)
			}
			if _, err := cli.Put(context.Background(), "after", "refused"); err == nil {
				t.Fatal("a put succeeded while the alarm stands: etcd must refuse it until disarmed")
			}

			for attempt := 1; attempt <= 2; attempt++ {
				if _, err := c.Apply(context.Background(), membership.Action{Type: membership.ActionDisarmAlarm, LeaderEndpoint: endpointOf(leader)}); err != nil {
					t.Fatalf("disarm, attempt %d (a retry finds nothing to disarm): %v", attempt, err)
				}
			}
			if ms := readMembership(t, c); len(ms.Alarms()) != 0 {
				t.Errorf("alarms after disarming: %+v", ms.Alarms())
			}
			if _, err := cli.Put(context.Background(), "after", "accepted"); err != nil {
				t.Errorf("put after recovery: %v", err)
			}
		})
	}
}

// TestDefragmentOutlastsTheWait sends a defragmentation that takes longer
// than the hook waits: the call returns when the wait is over, without an
// error, and the member finishes it all the same.
func TestDefragmentOutlastsTheWait(t *testing.T) {
	etcdclient.SetDefragmentWait(t, 50*time.Millisecond)
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: version, ExtraArgs: []string{"--quota-backend-bytes=1073741824"}})
			cli := client(t, ec)
			c := dial(t, ec.Endpoints())
			// 64 MiB that stays and 64 MiB that goes: the rewrite copies
			// what stays, which takes longer than the wait.
			value := strings.Repeat("v", 100<<10)
			for _, prefix := range []string{"stays/", "goes/"} {
				for i := 0; i < 640; i++ {
					if _, err := cli.Put(context.Background(), fmt.Sprintf("%s%04d", prefix, i), value); err != nil {
						t.Fatal(err)
					}
				}
			}
			del, err := cli.Delete(context.Background(), "goes/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Compact(context.Background(), del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
			ms := readMembership(t, c)
			m := ms.Members[0]
			before := m.DBSize

			start := time.Now()
			if _, err := c.Apply(context.Background(), membership.Action{Type: membership.ActionDefragment, Name: m.Name, MemberID: m.ID, Endpoint: endpointOf(m), LeaderEndpoint: endpointOf(m)}); err != nil {
				t.Fatalf("a defragmentation that outlasts the wait counts as started, got %v", err)
			}
			returned := time.Since(start)
			if returned > time.Second {
				t.Errorf("the call took %v: it must return once the wait is over", returned)
			}
			ms = waitMembership(t, c, "finish the defragmentation", func(m membership.Member) bool { return m.Reachable && m.DBSize < before*3/4 })
			done := time.Since(start)
			t.Logf("%s: defragmentation of %d bytes (%d in use): the call returned after %v, the member answered with %d bytes after %v",
				version, before, m.DBSizeInUse, returned.Round(time.Millisecond), ms.Members[0].DBSize, done.Round(time.Millisecond))
			if log := ec.Members[0].Log(); !strings.Contains(log, "finished defragment") {
				t.Errorf("the member's log does not show the defragmentation finished")
			}
		})
	}
}
