package shard

import (
	"fmt"
	"slices"
	"testing"
)

func TestOwner(t *testing.T) {
	tests := []struct {
		reason string
		key    string
		peers  []string
		want   string
	}{
		{"no peer, no owner: the sync is answered where it arrived", "uid-1", nil, ""},
		{"one peer owns everything", "uid-1", []string{"10.0.0.1:8443"}, "10.0.0.1:8443"},
	}
	for _, tt := range tests {
		if got := Owner(tt.key, tt.peers); got != tt.want {
			t.Errorf("%s: Owner(%q, %v) = %q, want %q", tt.reason, tt.key, tt.peers, got, tt.want)
		}
	}
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("6f1c2a7e-%04x-4b1d-9a3c-%012x", i%65536, i)
	}
	return out
}

// TestOwnerIgnoresOrder: replicas resolve the peers in whatever order the
// DNS server gives them and must still agree.
func TestOwnerIgnoresOrder(t *testing.T) {
	peers := []string{"10.0.0.1:8443", "10.0.0.2:8443", "10.0.0.3:8443"}
	reversed := slices.Clone(peers)
	slices.Reverse(reversed)
	for _, k := range keys(1000) {
		if a, b := Owner(k, peers), Owner(k, reversed); a != b {
			t.Fatalf("key %s: owner %s in one order, %s in the other", k, a, b)
		}
	}
}

// TestOwnerSpreads: each of n replicas owns about 1/n of a fleet, which is
// what halves each replica's memory at two.
func TestOwnerSpreads(t *testing.T) {
	const n = 10000
	for _, peers := range [][]string{
		{"10.0.0.1:8443", "10.0.0.2:8443"},
		{"10.0.0.1:8443", "10.0.0.2:8443", "10.0.0.3:8443"},
		{"127.0.0.2:18080", "127.0.0.3:18080"},
	} {
		owned := map[string]int{}
		for _, k := range keys(n) {
			owned[Owner(k, peers)]++
		}
		fair := float64(n) / float64(len(peers))
		for _, p := range peers {
			if share := float64(owned[p]) / fair; share < 0.9 || share > 1.1 {
				t.Errorf("peers %v: %s owns %d of %d keys, %.2f of a fair share (want within 10%%)", peers, p, owned[p], n, share)
			}
		}
	}
}

// TestOwnerMovesLittle: a replica joining takes only the keys it wins, and
// one leaving gives up only its own: every other parent keeps its replica,
// its connections and its memos through a rollout of the hook.
func TestOwnerMovesLittle(t *testing.T) {
	two := []string{"10.0.0.1:8443", "10.0.0.2:8443"}
	three := append(slices.Clone(two), "10.0.0.3:8443")
	moved := 0
	for _, k := range keys(10000) {
		before, after := Owner(k, two), Owner(k, three)
		if before == after {
			continue
		}
		moved++
		if after != "10.0.0.3:8443" {
			t.Fatalf("key %s moved from %s to %s, not to the replica that joined", k, before, after)
		}
	}
	if share := float64(moved) / 10000; share < 0.3 || share > 0.37 {
		t.Errorf("a third replica took %.3f of the keys, want about 1/3", share)
	}
}
