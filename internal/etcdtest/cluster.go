package etcdtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// Options configures StartCluster.
type Options struct {
	// Size is the number of members; default 1.
	Size int
	// Version selects bin/etcd-v<Version>; default DefaultVersion. Binary,
	// if set, is used instead (and Version is only informational).
	Version string
	Binary  string
	// ExtraArgs are appended to every member's flags after the generated
	// ones, so they can also override them (etcd keeps a flag's last value),
	// e.g. "--unsafe-no-fsync" (3.5+) or a shorter "--election-timeout".
	ExtraArgs []string
	// Env is added to every member's environment (ETCD_* inherited from the
	// test's environment is removed, these are not).
	Env []string
	// StartTimeout bounds the wait for every member to report healthy, and
	// every later WaitHealthy/Restart; default 20 s.
	StartTimeout time.Duration
	// ClientTLS, when set, makes members serve clients over TLS with
	// client-certificate auth (https client URLs), and /health on a
	// plain-HTTP metrics URL, as member Pods do.
	ClientTLS *ServerTLS
}

// ServerTLS are the files a member serves clients TLS with.
type ServerTLS struct {
	CertFile, KeyFile, TrustedCAFile string
}

// Cluster is a set of etcd processes started together as a new cluster.
// Its methods must be called from the test goroutine.
type Cluster struct {
	// Members are in start order; tests may append members started with
	// StartMember so that Endpoints and InitialCluster include them.
	Members []*Member
	// Token is the --initial-cluster-token: unique per cluster so that
	// members of two concurrently running test clusters can never join each
	// other even if a port were reused.
	Token   string
	Version string

	t       testing.TB
	started []*Member // every member ever started, including failed attempts
}

// StartCluster starts opts.Size etcd members on free loopback ports, waits
// until each reports healthy, and registers a cleanup that stops them all
// (and prints their log tails if the test failed).
func StartCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Size == 0 {
		opts.Size = 1
	}
	if opts.Size < 0 {
		t.Fatalf("etcdtest: cluster size %d", opts.Size)
	}
	opts.Version = versionOrDefault(opts.Version)
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	bin := opts.Binary
	if bin == "" {
		bin = testenv.Binary(t, testenv.Etcd(opts.Version))
	}
	// TempDir before Cleanup: cleanups run last-registered first, so the
	// processes are gone before their data dirs are removed.
	root := t.TempDir()
	c := &Cluster{t: t, Version: opts.Version}
	t.Cleanup(func() { cleanupMembers(t, c.started) })

	for attempt := 1; attempt <= maxStartAttempts; attempt++ {
		members, err := c.startAttempt(bin, filepath.Join(root, fmt.Sprintf("attempt-%d", attempt)), opts)
		if err == nil {
			c.Members = members
			return c
		}
		retry := false
		for _, m := range members {
			retry = retry || m.bindFailed()
		}
		if !retry || attempt == maxStartAttempts {
			t.Fatalf("%v\n%s", err, showTails(members))
		}
		t.Logf("etcdtest: cluster lost a port race, retrying with new ports: %v", err)
		for _, m := range members {
			if err := m.stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
	panic("unreachable")
}

func (c *Cluster) startAttempt(bin, dir string, opts Options) ([]*Member, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	c.Token = token

	members := make([]*Member, opts.Size)
	peers := make([]string, opts.Size)
	for i := range members {
		clientURL, err := freeURL()
		if err != nil {
			return nil, err
		}
		peerURL, err := freeURL()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		members[i] = &Member{Name: name, ClientURL: clientURL, PeerURL: peerURL}
		peers[i] = name + "=" + peerURL
	}
	flags := []string{
		"--initial-cluster=" + strings.Join(peers, ","),
		"--initial-cluster-state=new",
		"--initial-cluster-token=" + token,
	}
	for i, p := range members {
		if opts.ClientTLS != nil {
			p.ClientURL = "https://" + strings.TrimPrefix(p.ClientURL, "http://")
		}
		members[i] = newMember(c.t, bin, p.Name, dir, p.ClientURL, p.PeerURL, flags, opts.ExtraArgs, opts.Env, opts.StartTimeout)
		if tls := opts.ClientTLS; tls != nil {
			metricsURL, err := freeURL()
			if err != nil {
				return nil, err
			}
			members[i].healthURL = metricsURL
			members[i].args = append(members[i].args, "--listen-metrics-urls="+metricsURL, "--client-cert-auth",
				"--cert-file="+tls.CertFile, "--key-file="+tls.KeyFile, "--trusted-ca-file="+tls.TrustedCAFile)
		}
	}
	for i, m := range members {
		if err := m.start(); err != nil {
			return members[:i], err
		}
		c.started = append(c.started, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	return members, waitHealthy(ctx, members)
}

func randomToken() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("etcdtest: random token: %w", err)
	}
	return "etcdtest-" + hex.EncodeToString(b), nil
}

// Endpoints returns every member's client URL, including stopped members
// (clients are expected to cope with dead endpoints; that is often the test).
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.ClientURL
	}
	return eps
}

// InitialCluster returns the --initial-cluster value for c.Members.
func (c *Cluster) InitialCluster() string {
	pairs := make([]string, len(c.Members))
	for i, m := range c.Members {
		pairs[i] = m.Name + "=" + m.PeerURL
	}
	return strings.Join(pairs, ",")
}

// InitialClusterWith is InitialCluster plus one new member, the value a
// member added with MemberAdd/MemberAddAsLearner must be started with.
func (c *Cluster) InitialClusterWith(name, peerURL string) string {
	s := c.InitialCluster()
	if s != "" {
		s += ","
	}
	return s + name + "=" + peerURL
}

func (c *Cluster) member(i int) *Member {
	c.t.Helper()
	if i < 0 || i >= len(c.Members) {
		c.t.Fatalf("etcdtest: member index %d out of range [0,%d)", i, len(c.Members))
	}
	return c.Members[i]
}

// Stop stops member i gracefully (SIGTERM, SIGKILL after 5 s).
func (c *Cluster) Stop(i int) { c.t.Helper(); c.member(i).Stop() }

// Kill SIGKILLs member i.
func (c *Cluster) Kill(i int) { c.t.Helper(); c.member(i).Kill() }

// Start starts stopped member i without waiting for it to become healthy.
func (c *Cluster) Start(i int) { c.t.Helper(); c.member(i).Start() }

// Restart stops member i if running, starts it and waits until healthy.
func (c *Cluster) Restart(i int) { c.t.Helper(); c.member(i).Restart() }

// WaitHealthy waits until every running member reports healthy.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	var running []*Member
	for _, m := range c.Members {
		if m.Running() {
			running = append(running, m)
		}
	}
	timeout := defaultStartTimeout
	if len(running) > 0 {
		timeout = running[0].startTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := waitHealthy(ctx, running); err != nil {
		c.t.Fatalf("%v\n%s", err, showTails(running))
	}
}
