package etcdclient_test

import (
	"context"
	"strings"
	"testing"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/membership"
)

// TestDowngradeProtocol runs etcd's downgrade actions against real 3.7
// members: a refused validation changes nothing and carries etcd's reason;
// enable lowers every member's storage version; a retried enable and a
// retried cancel are what was asked for; cancel lets the storage version
// rise again. The binaries' part of a downgrade is the e2e suite's.
func TestDowngradeProtocol(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3, Version: etcdtest.Version37})
	c := dial(t, ec.Endpoints())
	ms := waitMembership(t, c, "report storage version 3.7", func(m membership.Member) bool { return m.StorageVersion == "3.7.0" })
	leader := endpointOf(leaderOf(ms))
	apply := func(a membership.Action) error {
		t.Helper()
		a.LeaderEndpoint = leader
		_, err := c.Apply(context.Background(), a)
		return err
	}

	err := apply(membership.Action{Type: membership.ActionEnableDowngrade, Version: "3.5"})
	if err == nil || !strings.Contains(err.Error(), "invalid downgrade target version") {
		t.Fatalf("enable 3.5 on a 3.7 cluster: want etcd's refusal naming an invalid target, got %v", err)
	}
	for _, m := range readMembership(t, c).Members {
		if m.DowngradeTarget != "" || m.StorageVersion != "3.7.0" {
			t.Errorf("member %s after a refused validation: downgrade %q, storage %q; want nothing changed", m.Name, m.DowngradeTarget, m.StorageVersion)
		}
	}

	for attempt := 1; attempt <= 2; attempt++ {
		if err := apply(membership.Action{Type: membership.ActionEnableDowngrade, Version: "3.6"}); err != nil {
			t.Fatalf("enable 3.6, attempt %d (a retry finds it enabled): %v", attempt, err)
		}
	}
	waitMembership(t, c, "lower their storage version to 3.6 with the downgrade enabled", func(m membership.Member) bool {
		return m.DowngradeTarget == "3.6.0" && m.StorageVersion == "3.6.0" && m.Version == etcdtest.Version37
	})

	for attempt := 1; attempt <= 2; attempt++ {
		if err := apply(membership.Action{Type: membership.ActionCancelDowngrade}); err != nil {
			t.Fatalf("cancel, attempt %d (a retry finds none in flight): %v", attempt, err)
		}
	}
	waitMembership(t, c, "return to storage version 3.7 once the downgrade is cancelled", func(m membership.Member) bool {
		return m.DowngradeTarget == "" && m.StorageVersion == "3.7.0"
	})
}
