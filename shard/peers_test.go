package shard

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNewPeersRefuses(t *testing.T) {
	tests := []struct {
		reason, spec, self, err string
	}{
		{"no entry", " , ", "10.0.0.1", "no peers given"},
		{"an empty port", "10.0.0.1:", "10.0.0.1", "neither host nor host:port"},
		{"this replica's address is a name", "etcd-hook-peers:8443", "etcd-hook-0", "neither an IP nor IP:port"},
	}
	for _, tt := range tests {
		if _, err := NewPeers(tt.spec, tt.self, "8443", nil); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: NewPeers(%q, %q) = %v, want an error containing %q", tt.reason, tt.spec, tt.self, err, tt.err)
		}
	}
}

func TestPeersRefresh(t *testing.T) {
	answers := map[string][]string{"etcd-hook-peers.ns.svc": {"10.0.0.3", "10.0.0.1", "fd00::2"}}
	var failing error
	lookup := func(ctx context.Context, host string) ([]string, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a lookup without a deadline")
		}
		if failing != nil {
			return nil, failing
		}
		return answers[host], nil
	}
	p, err := NewPeers("etcd-hook-peers.ns.svc, 10.0.0.1:8443", "10.0.0.1", "8443", lookup)
	if err != nil {
		t.Fatal(err)
	}
	if p.Current() != nil {
		t.Fatalf("peers before the first refresh: %v", p.Current())
	}
	if err := p.Refresh(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.1:8443", "10.0.0.3:8443"}
	if diff := cmp.Diff(want, p.Current()); diff != "" {
		t.Errorf("resolved peers, sorted, each once, in this replica's family (-want +got):\n%s", diff)
	}

	failing = errors.New("i/o timeout")
	if err := p.Refresh(context.Background(), time.Second); err == nil || p.Err() == nil {
		t.Fatal("a failed lookup reported no error")
	}
	if diff := cmp.Diff(want, p.Current()); diff != "" {
		t.Errorf("a failed lookup must keep the peers resolved last (-want +got):\n%s", diff)
	}
	failing = nil
	answers["etcd-hook-peers.ns.svc"] = []string{"10.0.0.3"}
	if err := p.Refresh(context.Background(), time.Second); err != nil || p.Err() != nil {
		t.Fatalf("refresh: %v, Err %v", err, p.Err())
	}
	if diff := cmp.Diff([]string{"10.0.0.1:8443", "10.0.0.3:8443"}, p.Current()); diff != "" {
		t.Errorf("a replica gone from the name (-want +got):\n%s", diff)
	}
}

// TestPeersAtOwnPort: an entry without a port is at this replica's own,
// which is how the manifests name the headless Service for plain HTTP and
// HTTPS alike.
func TestPeersAtOwnPort(t *testing.T) {
	lookup := func(context.Context, string) ([]string, error) { return []string{"10.0.0.2", "fd00::2"}, nil }
	p, err := NewPeers("etcd-hook-peers.ns.svc,10.0.0.1,[fd00::1],10.0.0.9:9000", "10.0.0.1", "8443", lookup)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.1:8443", "10.0.0.2:8443", "10.0.0.9:9000", "[fd00::1]:8443"}
	if diff := cmp.Diff(want, p.Current()); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}
	if _, err := NewPeers("etcd-hook-peers.ns.svc", "10.0.0.1", "", lookup); err == nil || !strings.Contains(err.Error(), "has no port") {
		t.Errorf("an entry without a port and no port of one's own: %v", err)
	}
}

// TestPeersDualStack: a dual-stack headless Service lists every replica
// under both families; each replica is one peer, in the family of the
// address it knows itself by.
func TestPeersDualStack(t *testing.T) {
	lookup := func(context.Context, string) ([]string, error) {
		return []string{"10.0.0.1", "fd00::1", "10.0.0.2", "fd00::2"}, nil
	}
	for self, want := range map[string][]string{
		"10.0.0.1": {"10.0.0.1:8443", "10.0.0.2:8443"},
		"fd00::1":  {"[fd00::1]:8443", "[fd00::2]:8443"},
	} {
		p, err := NewPeers("etcd-hook-peers.ns.svc", self, "8443", lookup)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Refresh(context.Background(), time.Second); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, p.Current()); diff != "" {
			t.Errorf("self %s: peers (-want +got):\n%s", self, diff)
		}
		if !p.Self(want[0]) {
			t.Errorf("self %s: %s is not this replica", self, want[0])
		}
	}
}

func TestPeersSelf(t *testing.T) {
	tests := []struct {
		reason, self, peer string
		want               bool
	}{
		{"the Pod's IP, any port", "10.0.0.1", "10.0.0.1:8443", true},
		{"another Pod", "10.0.0.1", "10.0.0.2:8443", false},
		{"replicas sharing an IP: the port tells them apart", "127.0.0.1:18080", "127.0.0.1:18081", false},
		{"replicas sharing an IP: this one", "127.0.0.1:18080", "127.0.0.1:18080", true},
		{"IPv6", "fd00::2", "[fd00::2]:8443", true},
		{"not an address", "10.0.0.1", "peers:8443", false},
	}
	for _, tt := range tests {
		p, err := NewPeers("peers:8443", tt.self, "8443", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Self(tt.peer); got != tt.want {
			t.Errorf("%s: self %s, Self(%s) = %v, want %v", tt.reason, tt.self, tt.peer, got, tt.want)
		}
	}
}

// TestPeersRun: the loop resolves at once and ends with its context.
func TestPeersRun(t *testing.T) {
	calls := make(chan struct{}, 100)
	p, err := NewPeers("peers:8443", "10.0.0.1", "8443", func(context.Context, string) ([]string, error) {
		calls <- struct{}{}
		return []string{"10.0.0.1"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, time.Hour, time.Second, nil); close(done) }()
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not resolve at once")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end with its context")
	}
	if !slices.Equal(p.Current(), []string{"10.0.0.1:8443"}) {
		t.Errorf("peers = %v", p.Current())
	}
}
