package archive

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Listed is one entry of a store's listing.
type Listed struct {
	Key      string
	Size     int64
	Modified time.Time
}

// History is every object of one etcd cluster's history in a store.
type History struct {
	ID string
	// Snapshots by revision; Deltas by From, then To.
	Snapshots []Object
	Deltas    []Object
	// Newest is the latest Modified of its objects: histories are ordered
	// by it, since their revisions are not comparable.
	Newest time.Time
}

// Histories groups a listing of base's objects by history, newest history
// first. Keys that are not continuous backups of base are left out.
func Histories(base string, listing []Listed) []History {
	byID := map[string]*History{}
	for _, l := range listing {
		o, ok := ParseKey(base, l.Key)
		if !ok {
			continue
		}
		o.Size, o.Modified = l.Size, l.Modified
		h := byID[o.History]
		if h == nil {
			h = &History{ID: o.History}
			byID[o.History] = h
		}
		if o.Kind == KindSnapshot {
			h.Snapshots = append(h.Snapshots, o)
		} else {
			h.Deltas = append(h.Deltas, o)
		}
		if o.Modified.After(h.Newest) {
			h.Newest = o.Modified
		}
	}
	out := make([]History, 0, len(byID))
	for _, h := range byID {
		slices.SortFunc(h.Snapshots, func(a, b Object) int { return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.Key, b.Key)) })
		slices.SortFunc(h.Deltas, func(a, b Object) int {
			return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To), cmp.Compare(a.Key, b.Key))
		})
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b History) int { return cmp.Or(b.Newest.Compare(a.Newest), cmp.Compare(a.ID, b.ID)) })
	return out
}

// End is the newest revision the history holds, through any of its
// snapshots and the deltas that follow it without a gap; 0 when it holds
// no snapshot.
func (h History) End() int64 {
	var end int64
	for _, s := range h.Snapshots {
		end = max(end, h.reach(s.To))
	}
	return end
}

// reach is the highest revision the deltas cover from rev on without a
// gap.
func (h History) reach(rev int64) int64 {
	for {
		next := rev
		for _, d := range h.Deltas {
			if d.From <= rev+1 && d.To > next {
				next = d.To
			}
		}
		if next == rev {
			return rev
		}
		rev = next
	}
}

// Target is what a restore asks for: a revision, a moment, or neither
// (the newest state the history holds).
type Target struct {
	Revision int64
	Time     time.Time
}

func (t Target) String() string {
	switch {
	case t.Revision != 0:
		return fmt.Sprintf("revision %d", t.Revision)
	case !t.Time.IsZero():
		return t.Time.UTC().Format(time.RFC3339Nano)
	}
	return "the newest revision"
}

// Refusals: a restore that meets one touches nothing.
var (
	ErrEmpty        = errors.New("the store holds no snapshot of a continuous backup")
	ErrBeforeOldest = errors.New("the target is older than the oldest snapshot")
	ErrAfterNewest  = errors.New("the target is newer than the newest stored revision")
	ErrGap          = errors.New("the chain has a gap")
)

// Path is what a restore to a target reads: a snapshot and the deltas
// after it, in order, each starting at or before the revision after the
// one before it ends. Deltas may overlap (two archivers wrote the same
// revisions, see doc.go); replay skips what it applied already.
type Path struct {
	History  string
	Snapshot Object
	Deltas   []Object
	// Revision is the target revision. For a time target, the deltas'
	// names only bound it when Resolved is false: the replay then stops
	// at the first revision of the last delta received after the time.
	Revision int64
	Resolved bool
}

// Select picks the path to t in h. A time target is resolved to the
// newest revision seen committed at or before it, as far as names tell:
// the path ends with the delta that may hold it, and Resolved says whether
// the revision is exact yet.
func Select(h History, t Target) (Path, error) {
	if len(h.Snapshots) == 0 {
		return Path{}, ErrEmpty
	}
	oldest := h.Snapshots[0]
	end := h.End()
	p := Path{History: h.ID, Revision: t.Revision, Resolved: true}
	switch {
	case t.Revision != 0:
		if t.Revision < oldest.To {
			return Path{}, fmt.Errorf("%w: revision %d, and the oldest snapshot of history %s is at revision %d", ErrBeforeOldest, t.Revision, h.ID, oldest.To)
		}
		if last := h.LastRevision(); t.Revision > last {
			return Path{}, fmt.Errorf("%w: revision %d, and history %s holds revisions up to %d", ErrAfterNewest, t.Revision, h.ID, last)
		}
	case !t.Time.IsZero():
		rev, exact, ok := h.revisionAt(t.Time)
		if !ok {
			return Path{}, fmt.Errorf("%w: %s, and the oldest snapshot of history %s was complete at %s", ErrBeforeOldest,
				t, h.ID, oldest.First.Format(time.RFC3339Nano))
		}
		p.Revision, p.Resolved = rev, exact
	default:
		p.Revision = end
	}
	// The newest snapshot at or below the target: an older one cannot
	// cross a gap that this one cannot.
	i, _ := slices.BinarySearchFunc(h.Snapshots, p.Revision+1, func(o Object, rev int64) int { return cmp.Compare(o.To, rev) })
	p.Snapshot = h.Snapshots[i-1]
	rev := p.Snapshot.To
	for rev < p.Revision {
		best := -1
		for j, d := range h.Deltas {
			if d.From <= rev+1 && d.To > rev && (best < 0 || d.To > h.Deltas[best].To) {
				best = j
			}
		}
		if best < 0 {
			next := p.Revision
			for _, d := range h.Deltas {
				if d.From > rev+1 && d.From <= next {
					next = d.From - 1
				}
			}
			return Path{}, fmt.Errorf("%w: history %s holds no revision from %d to %d, which a restore to %s from the snapshot at revision %d needs",
				ErrGap, h.ID, rev+1, next, t, p.Snapshot.To)
		}
		p.Deltas = append(p.Deltas, h.Deltas[best])
		rev = h.Deltas[best].To
	}
	return p, nil
}

// LastRevision is the newest revision any object of h names: where an
// archiver resumes.
func (h History) LastRevision() int64 {
	var last int64
	for _, s := range h.Snapshots {
		last = max(last, s.To)
	}
	for _, d := range h.Deltas {
		last = max(last, d.To)
	}
	return last
}

// revisionAt is the newest revision seen committed at or before t, as the
// names tell it: a snapshot complete by t, or a delta whose revisions were
// all seen by t, gives an exact answer; a delta seen partly before and
// partly after t holds it somewhere within (exact false, and the revision
// is that delta's To, the bound the path must reach). ok is false when
// nothing was complete by t.
func (h History) revisionAt(t time.Time) (rev int64, exact, ok bool) {
	for _, s := range h.Snapshots {
		if !s.Last.After(t) {
			rev, exact, ok = max(rev, s.To), true, true
		}
	}
	if !ok {
		return 0, false, false
	}
	for _, d := range h.Deltas {
		switch {
		case !d.Last.After(t) && d.To >= rev:
			rev, exact = d.To, true
		case !d.First.After(t) && d.To > rev:
			// Seen partly by t: the target is inside it.
			rev, exact = d.To, false
		}
	}
	return rev, exact, true
}

// Expired lists the objects to delete so that the keep newest snapshots
// remain, each with the deltas that follow it: newest by history, then by
// revision. A delta is kept while a kept snapshot of its history is older
// than its last revision, so no kept delta ever loses its base; a history
// with no kept snapshot goes whole. The current history's newest snapshot
// is never listed. keep <= 0 keeps everything.
func Expired(histories []History, keep int, current string) []Object {
	if keep <= 0 {
		return nil
	}
	type ranked struct {
		h int
		s Object
	}
	var all []ranked
	for i, h := range histories {
		for _, s := range h.Snapshots {
			all = append(all, ranked{i, s})
		}
	}
	// histories is newest first; within one, newest revision first.
	slices.SortStableFunc(all, func(a, b ranked) int { return cmp.Or(cmp.Compare(a.h, b.h), cmp.Compare(b.s.To, a.s.To)) })
	oldestKept := map[string]int64{}
	var out []Object
	for n, r := range all {
		h := histories[r.h]
		newestOfCurrent := h.ID == current && r.s.To == h.Snapshots[len(h.Snapshots)-1].To
		if n < keep || newestOfCurrent {
			oldestKept[h.ID] = r.s.To
			continue
		}
		out = append(out, r.s)
	}
	for _, h := range histories {
		base, kept := oldestKept[h.ID]
		for _, d := range h.Deltas {
			if !kept || d.To <= base {
				out = append(out, d)
			}
		}
	}
	return out
}

// ErrAmbiguous: more than one history holds the revision asked for, and
// none was named.
var ErrAmbiguous = errors.New("more than one history holds the revision")

// PickHistory is the history of hs (newest first, as Histories orders
// them) a target is restored from when none is named: for the newest
// state, the newest history; for a moment, the newest history that was
// being archived by then (its oldest snapshot complete at or before it);
// for a revision, the one history that holds it. A restore makes a new
// history, so the state before a restore is found by what it asks for,
// not by the store's newest objects. nil when hs is empty; with no
// history that fits, the newest, for Select to say why.
func PickHistory(hs []History, t Target) (*History, error) {
	if len(hs) == 0 {
		return nil, nil
	}
	switch {
	case !t.Time.IsZero():
		for i := range hs {
			if len(hs[i].Snapshots) > 0 && !hs[i].Snapshots[0].Last.After(t.Time) {
				return &hs[i], nil
			}
		}
	case t.Revision > 0:
		var holding []string
		var found *History
		for i := range hs {
			if _, err := Select(hs[i], t); err == nil {
				holding = append(holding, hs[i].ID)
				if found == nil {
					found = &hs[i]
				}
			}
		}
		if len(holding) > 1 {
			return nil, fmt.Errorf("%w: revision %d is in histories %s; name one by the key of one of its snapshots", ErrAmbiguous, t.Revision, strings.Join(holding, " and "))
		}
		if found != nil {
			return found, nil
		}
	}
	return &hs[0], nil
}
