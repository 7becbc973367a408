package archive

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	testBase    = "backups/demo"
	testHistory = "00000000000000ab"
)

var t0 = time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func snapKey(h string, rev int64, s int) string {
	return HistoryDir(testBase, h) + SnapshotName(rev, at(s), Encoding{})
}

func deltaKey(h string, from, to int64, first, last int) string {
	return HistoryDir(testBase, h) + DeltaName(from, to, at(first), at(last), Encoding{Compressed: true})
}

func TestParseKey(t *testing.T) {
	dir := HistoryDir(testBase, testHistory)
	cases := []struct {
		name, reason, key string
		want              *Object
	}{
		{"snapshot", "revision and completion time from the name", dir + SnapshotName(42, at(1), Encoding{}),
			&Object{Kind: KindSnapshot, From: 42, To: 42, First: at(1), Last: at(1)}},
		{"sealed compressed snapshot", "both suffixes, in that order", dir + SnapshotName(42, at(1), Encoding{true, true}),
			&Object{Kind: KindSnapshot, From: 42, To: 42, First: at(1), Last: at(1), Encoding: Encoding{true, true}}},
		{"delta", "its revision range and times", dir + DeltaName(43, 99, at(2), at(4), Encoding{Compressed: true}),
			&Object{Kind: KindDelta, From: 43, To: 99, First: at(2), Last: at(4), Encoding: Encoding{Compressed: true}}},
		{"uncompressed delta", "the archiver never writes one", dir + DeltaName(43, 99, at(2), at(4), Encoding{}), nil},
		{"delta backwards", "from after to", dir + "delta-00000000000000000099-00000000000000000043-0000000000000-0000000000000.zst", nil},
		{"not padded", "one object has one name", dir + "snap-42-0000000000000", nil},
		{"another base", "a key of another backup", "backups/other" + Dir + testHistory + "/" + SnapshotName(42, at(1), Encoding{}), nil},
		{"periodic backup", "the periodic snapshots beside it are not ours", testBase + "_v42_2026-11-27-03:00:00", nil},
		{"bad history", "not a cluster ID", testBase + Dir + "xyz/" + SnapshotName(42, at(1), Encoding{}), nil},
		{"suffixes swapped", "not a name the archiver writes", dir + "snap-00000000000000000042-0000000000000.sealed.zst", nil},
		{"trailing garbage", "a partial upload's temporary name", dir + SnapshotName(42, at(1), Encoding{}) + ".part", nil},
	}
	for _, tc := range cases {
		got, ok := ParseKey(testBase, tc.key)
		if tc.want == nil {
			if ok {
				t.Errorf("%s (%s): parsed %q as %+v, want it left alone", tc.name, tc.reason, tc.key, got)
			}
			continue
		}
		want := *tc.want
		want.Key, want.History = tc.key, testHistory
		want.Name = tc.key[len(dir):]
		if !ok {
			t.Errorf("%s (%s): %q not parsed", tc.name, tc.reason, tc.key)
		} else if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (%s) (-want +got):\n%s", tc.name, tc.reason, diff)
		}
	}
}

func listing(keys ...string) []Listed {
	var out []Listed
	for i, k := range keys {
		out = append(out, Listed{Key: k, Size: 1, Modified: at(1000 + i)})
	}
	return out
}

// pathKeys is the path as keys: the snapshot first.
func pathKeys(p Path) []string {
	keys := []string{p.Snapshot.Key}
	for _, d := range p.Deltas {
		keys = append(keys, d.Key)
	}
	return keys
}

func TestSelect(t *testing.T) {
	h := testHistory
	// A history: a snapshot at 100, deltas to 400, a second snapshot at
	// 250, and after a compaction a gap from 401 to 499 and a new
	// snapshot at 500 with deltas to 600. A second archiver wrote 201-260
	// beside the first's 201-300.
	chain := listing(
		snapKey(h, 100, 0),
		deltaKey(h, 101, 200, 1, 10),
		deltaKey(h, 201, 300, 11, 20),
		deltaKey(h, 201, 260, 11, 15),
		snapKey(h, 250, 16),
		deltaKey(h, 301, 400, 21, 30),
		snapKey(h, 500, 40),
		deltaKey(h, 501, 600, 41, 50),
	)
	cases := []struct {
		name, reason string
		target       Target
		want         []string
		revision     int64
		resolved     bool
		err          error
	}{
		{"newest", "no target: the newest snapshot and the deltas after it", Target{},
			[]string{snapKey(h, 500, 40), deltaKey(h, 501, 600, 41, 50)}, 600, true, nil},
		{"at a snapshot", "the snapshot alone", Target{Revision: 250}, []string{snapKey(h, 250, 16)}, 250, true, nil},
		{"inside a delta", "the newest snapshot below, then the deltas up to the one that holds it",
			Target{Revision: 150}, []string{snapKey(h, 100, 0), deltaKey(h, 101, 200, 1, 10)}, 150, true, nil},
		{"across a second archiver's copy", "the longest delta at each step; the snapshot at 250 is newer",
			Target{Revision: 350}, []string{snapKey(h, 250, 16), deltaKey(h, 201, 300, 11, 20), deltaKey(h, 301, 400, 21, 30)}, 350, true, nil},
		{"end of a chain", "the last revision before the gap", Target{Revision: 400},
			[]string{snapKey(h, 250, 16), deltaKey(h, 201, 300, 11, 20), deltaKey(h, 301, 400, 21, 30)}, 400, true, nil},
		{"in the gap", "refused: nothing holds it", Target{Revision: 450}, nil, 0, false, ErrGap},
		{"before the oldest", "refused", Target{Revision: 99}, nil, 0, false, ErrBeforeOldest},
		{"after the newest", "refused", Target{Revision: 601}, nil, 0, false, ErrAfterNewest},
		{"time before any snapshot was complete", "refused", Target{Time: at(0).Add(-time.Millisecond)}, nil, 0, false, ErrBeforeOldest},
		{"time at a snapshot", "complete by then, and no delta seen by then", Target{Time: at(0)}, []string{snapKey(h, 100, 0)}, 100, true, nil},
		{"time inside a delta", "the delta that holds it; the replay resolves the revision",
			Target{Time: at(5)}, []string{snapKey(h, 100, 0), deltaKey(h, 101, 200, 1, 10)}, 200, false, nil},
		{"time between deltas", "the last delta seen whole by then, exactly",
			Target{Time: at(35)}, []string{snapKey(h, 250, 16), deltaKey(h, 201, 300, 11, 20), deltaKey(h, 301, 400, 21, 30)}, 400, true, nil},
		{"time after everything", "the newest", Target{Time: at(99)}, []string{snapKey(h, 500, 40), deltaKey(h, 501, 600, 41, 50)}, 600, true, nil},
	}
	hs := Histories(testBase, chain)
	if len(hs) != 1 {
		t.Fatalf("%d histories, want 1", len(hs))
	}
	for _, tc := range cases {
		p, err := Select(hs[0], tc.target)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s (%s): error %v, want %v", tc.name, tc.reason, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s (%s): %v", tc.name, tc.reason, err)
			continue
		}
		if diff := cmp.Diff(tc.want, pathKeys(p)); diff != "" || p.Revision != tc.revision || p.Resolved != tc.resolved {
			t.Errorf("%s (%s): revision %d (resolved %v), want %d (%v); path (-want +got):\n%s", tc.name, tc.reason,
				p.Revision, p.Resolved, tc.revision, tc.resolved, diff)
		}
	}
}

func TestHistoriesOrder(t *testing.T) {
	old, current := "0000000000000001", "0000000000000002"
	hs := Histories(testBase, []Listed{
		{Key: snapKey(current, 5, 0), Modified: at(50)},
		{Key: snapKey(old, 900, 0), Modified: at(10)},
		{Key: "unrelated", Modified: at(99)},
	})
	var ids []string
	for _, h := range hs {
		ids = append(ids, h.ID)
	}
	if diff := cmp.Diff([]string{current, old}, ids); diff != "" {
		t.Errorf("histories are ordered by their newest object, not by revision (-want +got):\n%s", diff)
	}
}

func TestExpired(t *testing.T) {
	h, old := testHistory, "0000000000000001"
	objects := listing(
		snapKey(old, 9000, 0),
		deltaKey(old, 9001, 9100, 1, 2),
		snapKey(h, 100, 3),
		deltaKey(h, 101, 200, 4, 5),
		snapKey(h, 150, 6),
		deltaKey(h, 201, 300, 7, 8),
		snapKey(h, 300, 9),
		deltaKey(h, 301, 400, 10, 11),
	)
	cases := []struct {
		name, reason string
		keep         int
		want         []string
	}{
		{"keep all", "0 keeps everything", 0, nil},
		{"keep 2", "the two newest snapshots of the current history and every delta that follows the older of them; the old history goes whole",
			2, []string{snapKey(h, 100, 3), snapKey(old, 9000, 0), deltaKey(old, 9001, 9100, 1, 2)}},
		{"keep 1", "the delta 201-300 ends at the kept snapshot: nothing after it needs it",
			1, []string{snapKey(h, 150, 6), snapKey(h, 100, 3), snapKey(old, 9000, 0),
				deltaKey(old, 9001, 9100, 1, 2), deltaKey(h, 101, 200, 4, 5), deltaKey(h, 201, 300, 7, 8)}},
		{"keep 4", "the old history's snapshot is the fourth newest, and keeps its delta", 4, nil},
	}
	for _, tc := range cases {
		hs := Histories(testBase, objects)
		var got []string
		for _, o := range Expired(hs, tc.keep, h) {
			got = append(got, o.Key)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (%s) (-want +got):\n%s", tc.name, tc.reason, diff)
		}
	}
}

// Whatever the listing, Select never returns a path with a gap, and
// returns one whenever the deltas cover the target without a gap.
func FuzzSelect(f *testing.F) {
	f.Add([]byte{10, 5, 20, 1, 30, 2, 40}, int64(35))
	f.Add([]byte{0, 3, 9, 1, 5, 200, 9}, int64(0))
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1}, int64(7))
	f.Fuzz(func(t *testing.T, data []byte, target int64) {
		var keys []string
		var snaps []int64
		type span struct{ from, to int64 }
		var deltas []span
		rev := int64(1)
		for i := 0; i+1 < len(data) && i < 40; i += 2 {
			step := int64(data[i+1]%50) + 1
			switch data[i] % 4 {
			case 0:
				snaps = append(snaps, rev)
				keys = append(keys, snapKey(testHistory, rev, i))
			case 1, 2:
				deltas = append(deltas, span{rev + 1, rev + step})
				keys = append(keys, deltaKey(testHistory, rev+1, rev+step, i, i+1))
				rev += step
			case 3:
				// A gap, or an overlapping copy.
				if data[i+1]%2 == 0 {
					rev += step
				} else if rev > step {
					deltas = append(deltas, span{rev - step + 1, rev})
					keys = append(keys, deltaKey(testHistory, rev-step+1, rev, i, i+1))
				}
			}
		}
		hs := Histories(testBase, listing(keys...))
		if len(hs) == 0 {
			return
		}
		target = target % (rev + 10)
		p, err := Select(hs[0], Target{Revision: max(target, 0)})
		covered := func(from, to int64) bool {
			for r := from; r <= to; r++ {
				ok := false
				for _, d := range deltas {
					ok = ok || d.from <= r && r <= d.to
				}
				if !ok {
					return false
				}
			}
			return true
		}
		if err != nil {
			if !errors.Is(err, ErrGap) && !errors.Is(err, ErrBeforeOldest) && !errors.Is(err, ErrAfterNewest) && !(errors.Is(err, ErrEmpty) && len(snaps) == 0) {
				t.Fatalf("unexpected error %v", err)
			}
			if errors.Is(err, ErrGap) {
				// Refused only if no snapshot at or below the target reaches it.
				for _, s := range snaps {
					if s <= target && covered(s+1, target) {
						t.Fatalf("refused %d with %v, but the snapshot at %d and the deltas reach it", target, err, s)
					}
				}
			}
			return
		}
		// The path starts at a snapshot at or below the target and leaves
		// no revision out up to it.
		next := p.Snapshot.To + 1
		if p.Snapshot.Kind != KindSnapshot || p.Snapshot.To > p.Revision {
			t.Fatalf("path starts at %+v for revision %d", p.Snapshot, p.Revision)
		}
		for _, d := range p.Deltas {
			if d.From > next {
				t.Fatalf("path %v leaves revisions %d to %d out", pathKeys(p), next, d.From-1)
			}
			next = max(next, d.To+1)
		}
		if next <= p.Revision {
			t.Fatalf("path %v ends at %d, short of %d", pathKeys(p), next-1, p.Revision)
		}
		if target > 0 && p.Revision != target {
			t.Fatalf("path to %d for a target of %d", p.Revision, target)
		}
	})
}

// TestPickHistory: a restore that names no history finds the one its
// target is in: a restore in between made a new one, newer in the store.
func TestPickHistory(t *testing.T) {
	before, after, other := "0000000000000001", "0000000000000002", "0000000000000003"
	listing := func(keys ...Listed) []History { return Histories(testBase, keys) }
	// before: revisions 100 to 300, archived from 0 s to 60 s; after (the
	// restored cluster, its revisions bumped): from 120 s on.
	two := listing(
		Listed{Key: snapKey(before, 100, 0), Modified: at(1)},
		Listed{Key: deltaKey(before, 101, 300, 10, 60), Modified: at(60)},
		Listed{Key: snapKey(after, 1_000_000_300, 120), Modified: at(121)},
		Listed{Key: deltaKey(after, 1_000_000_301, 1_000_000_400, 125, 180), Modified: at(180)},
	)
	cases := []struct {
		name, reason string
		hs           []History
		target       Target
		want         string
		err          error
	}{
		{"newest", "no target: the newest history", two, Target{}, after, nil},
		{"moment before the restore", "a moment at 30 s: the history archived then", two, Target{Time: at(30)}, before, nil},
		{"moment after the restore", "a moment at 150 s: the restored cluster's", two, Target{Time: at(150)}, after, nil},
		{"revision of the first", "revision 200 is in the first history only", two, Target{Revision: 200}, before, nil},
		{"revision of the second", "a bumped revision is in the restored one", two, Target{Revision: 1_000_000_350}, after, nil},
		{"revision in none", "no history holds it: the newest, whose Select says why", two, Target{Revision: 5_000_000_000}, after, nil},
		{"ambiguous", "two clusters' histories both hold revision 150: refused, not guessed", listing(
			Listed{Key: snapKey(before, 100, 0), Modified: at(1)},
			Listed{Key: deltaKey(before, 101, 300, 10, 60), Modified: at(60)},
			Listed{Key: snapKey(other, 50, 70), Modified: at(71)},
			Listed{Key: deltaKey(other, 51, 400, 75, 90), Modified: at(90)},
		), Target{Revision: 150}, "", ErrAmbiguous},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := PickHistory(tc.hs, tc.target)
			got := ""
			if h != nil {
				got = h.ID
			}
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("%s: history %q, error %v; want %q, %v", tc.reason, got, err, tc.want, tc.err)
			}
		})
	}
}
