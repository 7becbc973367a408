package etcdtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// MemberOptions configures StartMember.
type MemberOptions struct {
	// Name must match the name given to this member in InitialCluster.
	Name string
	// InitialCluster is the --initial-cluster value: every current member
	// plus this one, as name=peerURL pairs (see Cluster.InitialClusterWith).
	InitialCluster string
	// PeerURL defaults to this member's entry in InitialCluster, which is
	// normally the URL already given to MemberAdd/MemberAddAsLearner.
	PeerURL string
	// ClientURL defaults to a free loopback port.
	ClientURL string
	// Version defaults to DefaultVersion; Binary, if set, is used instead.
	Version string
	Binary  string
	// ExtraArgs are appended after the generated flags and so override them.
	ExtraArgs []string
	// Env is added to the process environment (ETCD_* from the test's own
	// environment is removed, these are not).
	Env []string
	// StartTimeout bounds the wait for /health; default 20 s.
	StartTimeout time.Duration
	// NoWait returns as soon as the process is started, for members that
	// are not expected to become healthy (no quorum, or a start meant to fail).
	NoWait bool
}

// maxStartAttempts bounds retries after a picked port was taken by someone
// else between the probe and etcd's bind.
const maxStartAttempts = 3

// StartMember starts one etcd process that joins an existing cluster
// (--initial-cluster-state=existing). The member must already have been
// added through the cluster API (MemberAdd or MemberAddAsLearner); etcd
// exits at start otherwise. Cleanup stops it when the test ends.
func StartMember(t testing.TB, opts MemberOptions) *Member {
	t.Helper()
	if opts.Name == "" {
		t.Fatal("etcdtest: MemberOptions.Name is required")
	}
	if opts.InitialCluster == "" {
		t.Fatal("etcdtest: MemberOptions.InitialCluster is required")
	}
	peerURL := opts.PeerURL
	if peerURL == "" {
		peerURL = peerURLOf(opts.InitialCluster, opts.Name)
		if peerURL == "" {
			t.Fatalf("etcdtest: member %q is not in initial cluster %q and no PeerURL was given", opts.Name, opts.InitialCluster)
		}
	}
	if err := checkLoopback(peerURL); err != nil {
		t.Fatal(err)
	}
	if opts.ClientURL != "" {
		if err := checkLoopback(opts.ClientURL); err != nil {
			t.Fatal(err)
		}
	}
	bin := opts.Binary
	if bin == "" {
		bin = testenv.Binary(t, testenv.Etcd(versionOrDefault(opts.Version)))
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = defaultStartTimeout
	}
	root := t.TempDir()

	var members []*Member
	t.Cleanup(func() { cleanupMembers(t, members) })

	flags := []string{
		"--initial-cluster=" + opts.InitialCluster,
		"--initial-cluster-state=existing",
	}
	for attempt := 1; attempt <= maxStartAttempts; attempt++ {
		clientURL := opts.ClientURL
		if clientURL == "" {
			u, err := freeURL()
			if err != nil {
				t.Fatal(err)
			}
			clientURL = u
		}
		dir := filepath.Join(root, fmt.Sprintf("attempt-%d", attempt))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
		m := newMember(t, bin, opts.Name, dir, clientURL, peerURL, flags, opts.ExtraArgs, opts.Env, timeout)
		members = append(members, m)
		if err := m.start(); err != nil {
			t.Fatal(err)
		}
		if opts.NoWait {
			return m
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := waitHealthy(ctx, []*Member{m})
		cancel()
		if err == nil {
			return m
		}
		// Only the client port is ours to change: the peer URL is already
		// registered in the cluster.
		if !m.bindFailed() || opts.ClientURL != "" || attempt == maxStartAttempts {
			t.Fatalf("%v\n%s", err, showTails([]*Member{m}))
		}
		t.Logf("etcdtest: member %s lost a port race, retrying: %v", m.Name, err)
	}
	panic("unreachable")
}
