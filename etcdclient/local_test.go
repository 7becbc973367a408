package etcdclient_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
)

// TestLocalReadMatchesConfirmed: in a steady cluster a member's local copy
// of the list is etcd's list, and the leader the statuses name is the one
// the confirmed read names.
func TestLocalReadMatchesConfirmed(t *testing.T) {
	for _, version := range versions {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3, Version: version})
			c := dial(t, ec.Endpoints())
			local, err := c.Membership(context.Background())
			if err != nil {
				t.Fatalf("Membership: %v", err)
			}
			confirmed, err := c.Confirm(context.Background())
			if err != nil {
				t.Fatalf("Confirm: %v", err)
			}
			if diff := cmp.Diff(summarize(confirmed), summarize(local)); diff != "" {
				t.Errorf("local read (-confirmed +local):\n%s", diff)
			}
			if local.Stale || local.LeaderID == 0 || local.LeaderID != confirmed.LeaderID {
				t.Errorf("local read: stale %v, leader %x; confirmed leader %x", local.Stale, local.LeaderID, confirmed.LeaderID)
			}
		})
	}
}

// TestLocalReadOfStoppedFirstMember: the member asked for its local list
// is down; the list comes from another member, and the read is not stale,
// since the two others are a quorum with a leader.
func TestLocalReadOfStoppedFirstMember(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	endpoints := ec.Endpoints()
	first := 0
	for i, ep := range endpoints {
		if ep < endpoints[first] {
			first = i
		}
	}
	ec.Stop(first)
	ms, err := dial(t, endpoints).Membership(context.Background())
	if err != nil {
		t.Fatalf("Membership: %v", err)
	}
	if ms.Stale || len(ms.Members) != 3 {
		t.Errorf("stale %v, %d members; want a fresh list of 3", ms.Stale, len(ms.Members))
	}
	for _, m := range ms.Members {
		if want := m.Name != ec.Members[first].Name; m.Reachable != want {
			t.Errorf("member %s reachable %v, want %v", m.Name, m.Reachable, want)
		}
	}
}
