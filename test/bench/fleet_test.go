package bench

import (
	"slices"
	"testing"
)

// The unreachable clusters sit where the 1000-cluster run put them, and in
// a fleet with TLS clusters they are of both kinds, each position once.
func TestSpreadPositions(t *testing.T) {
	if got, want := spreadPositions(1000, 5, 0), []int{100, 300, 500, 700, 900}; !slices.Equal(got, want) {
		t.Errorf("spreadPositions(1000, 5, 0) = %v, want %v", got, want)
	}
	for _, c := range []struct{ n, u, tlsEvery int }{{10000, 20, 2}, {300, 20, 2}, {1000, 20, 3}, {30, 20, 2}, {10, 20, 1}, {40, 20, 2}} {
		got := spreadPositions(c.n, c.u, c.tlsEvery)
		if len(got) != min(c.u, c.n) {
			t.Errorf("spreadPositions(%d, %d, %d): %d positions, want %d", c.n, c.u, c.tlsEvery, len(got), min(c.u, c.n))
		}
		var tls int
		for _, i := range got {
			if i < 0 || i >= c.n {
				t.Errorf("spreadPositions(%d, %d, %d): %d is outside the fleet", c.n, c.u, c.tlsEvery, i)
			}
			if isTLSAt(i, c.tlsEvery) {
				tls++
			}
		}
		if s := slices.Compact(slices.Sorted(slices.Values(got))); len(s) != len(got) {
			t.Errorf("spreadPositions(%d, %d, %d) = %v: a position twice", c.n, c.u, c.tlsEvery, got)
		}
		if c.tlsEvery > 1 && c.n >= 2*c.u && tls != len(got)/2 {
			t.Errorf("spreadPositions(%d, %d, %d) = %v: %d TLS of %d, want half", c.n, c.u, c.tlsEvery, got, tls, len(got))
		}
	}
}
