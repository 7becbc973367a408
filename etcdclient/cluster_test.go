package etcdclient_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/membership"
)

// These tests run the adapter against real etcd processes on loopback:
// the behaviour that matters (errors, learners, quorum) is etcd's own.

// versions are the oldest and the newest pinned line: 3.6 sits between
// them, and the e2e suite upgrades to it and downgrades to it.
var versions = []string{etcdtest.Version35, etcdtest.Version37}

func dial(t *testing.T, endpoints []string) etcdclient.Cluster {
	t.Helper()
	pool := etcdclient.NewPool(0)
	t.Cleanup(pool.Close)
	c, err := pool.Cluster(endpoints, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readMembership reads as a sync that may change something does: locally,
// then confirmed through the quorum.
func readMembership(t *testing.T, c etcdclient.Cluster) *membership.Membership {
	t.Helper()
	if _, err := c.Membership(context.Background()); err != nil {
		t.Fatalf("Membership: %v", err)
	}
	ms, err := c.Confirm(context.Background())
	if err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	return ms
}

type memberSummary struct {
	Name      string
	Learner   bool
	Reachable bool
	Version   string
}

func summarize(ms *membership.Membership) []memberSummary {
	var out []memberSummary
	for _, m := range ms.Members {
		out = append(out, memberSummary{m.Name, m.IsLearner, m.Reachable, m.Version})
	}
	slices.SortFunc(out, func(a, b memberSummary) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

func TestMembershipSingleAndThree(t *testing.T) {
	for _, version := range versions {
		for _, size := range []int{1, 3} {
			t.Run(version+"/"+string(rune('0'+size)), func(t *testing.T) {
				t.Parallel()
				ec := etcdtest.StartCluster(t, etcdtest.Options{Size: size, Version: version})
				ms := readMembership(t, dial(t, ec.Endpoints()))
				var want []memberSummary
				for _, m := range ec.Members {
					want = append(want, memberSummary{m.Name, false, true, version})
				}
				slices.SortFunc(want, func(a, b memberSummary) int {
					if a.Name < b.Name {
						return -1
					}
					return 1
				})
				if diff := cmp.Diff(want, summarize(ms)); diff != "" {
					t.Errorf("membership (-want +got):\n%s", diff)
				}
				if ms.LeaderID == 0 || ms.Stale {
					t.Errorf("LeaderID %x, Stale %v; want a leader from a linearizable read", ms.LeaderID, ms.Stale)
				}
				if !membership.HasQuorum(ms) {
					t.Error("a healthy cluster has no quorum by the planner's rules")
				}
				// The cluster ID goes into the bootstrap record: it must be
				// etcd's own, from the local read as from the confirmed one.
				cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 2 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer cli.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				resp, err := cli.MemberList(ctx)
				if err != nil {
					t.Fatal(err)
				}
				local, err := dial(t, ec.Endpoints()).Membership(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if want := resp.Header.ClusterId; ms.ClusterID != want || local.ClusterID != want || want == 0 {
					t.Errorf("cluster ID: confirmed %x, local %x, want etcd's %x", ms.ClusterID, local.ClusterID, want)
				}
			})
		}
	}
}

// TestLearnerLifecycle adds a learner, starts it, promotes it once caught
// up, and removes a member, each through Apply and each checked against
// etcd's own member list.
func TestLearnerLifecycle(t *testing.T) {
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: version})
			c := dial(t, ec.Endpoints())
			ctx := context.Background()
			leader := ec.Members[0].ClientURL

			peerURL := etcdtest.FreeURL(t)
			members, err := c.Apply(ctx, membership.Action{Type: membership.ActionAddMember, Name: "learner", PeerURL: peerURL, AsLearner: true, LeaderEndpoint: leader})
			if err != nil {
				t.Fatalf("add learner: %v", err)
			}
			added := find(members, peerURL)
			if added == nil || !added.IsLearner || added.Name != "" {
				t.Fatalf("after add, want an unstarted learner at %s, got %+v", peerURL, members)
			}
			// Adding the same peer URL again, as a retried sync would, is
			// not an error and adds nothing.
			again, err := c.Apply(ctx, membership.Action{Type: membership.ActionAddMember, Name: "learner", PeerURL: peerURL, AsLearner: true, LeaderEndpoint: leader})
			if err != nil || len(again) != 2 {
				t.Fatalf("repeated add: %v, %d members; want no error and 2 members", err, len(again))
			}

			learner := etcdtest.StartMember(t, etcdtest.MemberOptions{
				Name: "learner", Version: version, InitialCluster: ec.InitialClusterWith("learner", peerURL),
			})
			ec.Members = append(ec.Members, learner)
			c = dial(t, ec.Endpoints())
			var ms *membership.Membership
			deadline := time.Now().Add(15 * time.Second)
			for {
				ms = readMembership(t, c)
				if l := find(ms.Members, peerURL); l != nil && l.Reachable && l.RaftIndex > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if l := find(ms.Members, peerURL); l == nil || !l.Reachable || l.Name != "learner" {
				t.Fatalf("started learner not observed: %+v", ms.Members)
			}

			var promoted []membership.Member
			for range 50 {
				promoted, err = c.Apply(ctx, membership.Action{Type: membership.ActionPromoteMember, MemberID: added.ID, LeaderEndpoint: leader})
				if err == nil {
					break
				}
				if !errorsIs(err, etcdclient.ErrNotReady) {
					t.Fatalf("promote: %v", err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if p := find(promoted, peerURL); p == nil || p.IsLearner {
				t.Fatalf("after promote, want a voter at %s, got %+v (last error %v)", peerURL, promoted, err)
			}

			// etcd refuses to remove a member until its peers have been
			// connected for its health interval (5 s): not ready, not failed.
			var remaining []membership.Member
			for range 40 {
				remaining, err = c.Apply(ctx, membership.Action{Type: membership.ActionRemoveMember, MemberID: added.ID, LeaderEndpoint: leader})
				if !errorsIs(err, etcdclient.ErrNotReady) {
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			if err != nil || len(remaining) != 1 {
				t.Fatalf("remove: %v, members %+v", err, remaining)
			}
			if _, err := c.Apply(ctx, membership.Action{Type: membership.ActionRemoveMember, MemberID: added.ID, LeaderEndpoint: leader}); err != nil {
				t.Errorf("removing a member that is already gone must read back the list, got %v", err)
			}
		})
	}
}

func TestMoveLeader(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	c := dial(t, ec.Endpoints())
	ms := readMembership(t, c)
	var leaderEndpoint string
	var target uint64
	for i, m := range ms.Members {
		if m.ID == ms.LeaderID {
			leaderEndpoint = m.ClientURLs[0]
		} else if target == 0 {
			target = ms.Members[i].ID
		}
	}
	if _, err := c.Apply(context.Background(), membership.Action{Type: membership.ActionMoveLeader, MemberID: target, LeaderID: ms.LeaderID, LeaderEndpoint: leaderEndpoint}); err != nil {
		t.Fatalf("move leader: %v", err)
	}
	if after := readMembership(t, c); after.LeaderID != target {
		t.Errorf("leader after move = %x, want %x", after.LeaderID, target)
	}
}

// TestQuorumLossIsReportedStale stops two of three members: the list can
// no longer be read linearizably, so the survivor's own view comes back,
// marked stale, within the observation budget.
func TestQuorumLossIsReportedStale(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	c := dial(t, ec.Endpoints())
	ec.Stop(1)
	ec.Stop(2)
	start := time.Now()
	ms := readMembership(t, c)
	took := time.Since(start)
	if !ms.Stale || membership.HasQuorum(ms) || len(ms.Members) != 3 {
		t.Errorf("want a stale list of 3 without quorum, got stale=%v quorum=%v members=%d", ms.Stale, membership.HasQuorum(ms), len(ms.Members))
	}
	if limit := etcdclient.ObserveTimeout + etcdclient.CallTimeout; took > limit {
		t.Errorf("observation took %v, beyond its bound %v", took, limit)
	}
}

func TestUnreachableIsBounded(t *testing.T) {
	// A loopback port with nothing listening, and a name that never resolves.
	c := dial(t, []string{etcdtest.FreeURL(t), "http://nowhere.invalid:2379"})
	start := time.Now()
	if _, err := c.Membership(context.Background()); err == nil {
		t.Fatal("want an error from unreachable endpoints")
	}
	if took := time.Since(start); took > etcdclient.ObserveTimeout+time.Second {
		t.Errorf("unreachable observation took %v", took)
	}
}

func find(members []membership.Member, peerURL string) *membership.Member {
	for i := range members {
		if slices.Contains(members[i].PeerURLs, peerURL) {
			return &members[i]
		}
	}
	return nil
}

// TestRestartedMemberIsSeenSoon: a member restarts for an upgrade while the
// hook keeps syncing. Each sync's failed Status grows gRPC's reconnect
// backoff (1 s ×1.6 up to 120 s by default), and a member that is back
// would stay unreachable to the hook for the rest of it: the rollout would
// wait seconds per member, minutes after a longer outage.
func TestRestartedMemberIsSeenSoon(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	c := dial(t, ec.Endpoints())
	readMembership(t, c)
	ec.Stop(1)
	// Syncs while it is down, as often as the hook makes them while it
	// waits for a restarting member.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		readMembership(t, c)
		time.Sleep(250 * time.Millisecond)
	}
	ec.Start(1)
	ec.Members[1].WaitHealthy()
	back := time.Now()
	for {
		ms := readMembership(t, c)
		if m := find(ms.Members, ec.Members[1].PeerURL); m != nil && m.Reachable {
			break
		}
		if waited := time.Since(back); waited > 1500*time.Millisecond {
			t.Fatalf("member %s healthy again for %v, still unreachable to the hook", ec.Members[1].Name, waited)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("reachable %v after it was healthy again", time.Since(back).Round(time.Millisecond))
}

// TestSilentMemberCostsTheConnectBudget: a member whose address accepts TCP
// and never speaks (a hung node, a proxy with nothing behind it) costs a
// sync the connect budget, not the whole read budget: Metacontroller's few
// workers wait on it.
func TestSilentMemberCostsTheConnectBudget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	})
	c := dial(t, []string{"http://" + ln.Addr().String()})
	start := time.Now()
	if _, err := c.Membership(context.Background()); err == nil {
		t.Fatal("want an error from a member that never answers")
	}
	if took := time.Since(start); took >= etcdclient.ObserveTimeout {
		t.Errorf("a silent member cost %v, the whole read budget; want about the connect budget %v", took, etcdclient.ConnectTimeout)
	}
}
