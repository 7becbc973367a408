package archive

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Dir is what a continuous backup's objects sit under: the EtcdBackup's
// own key (the S3 key, or the path on the volume) with this suffix, then
// one directory per history. The suffix keeps them apart from the
// one-shot and periodic snapshots the same key names.
const Dir = ".pitr/"

// Kind tells a full snapshot from a delta.
type Kind int

const (
	KindSnapshot Kind = iota + 1
	KindDelta
)

func (k Kind) String() string {
	switch k {
	case KindSnapshot:
		return "snapshot"
	case KindDelta:
		return "delta"
	}
	return "unknown"
}

// Encoding is what was done to an object's bytes, in this order:
// compressed (zstd), then sealed (see seal.go). Its name says so with the
// suffixes ".zst" and ".sealed", so that anyone can tell which objects
// etcdutl reads as they are: a snapshot with neither.
type Encoding struct {
	Compressed bool
	Sealed     bool
}

func (e Encoding) suffix() string {
	s := ""
	if e.Compressed {
		s += ".zst"
	}
	if e.Sealed {
		s += ".sealed"
	}
	return s
}

// Object is one stored object of a history, as its name describes it.
type Object struct {
	// Key is the object's full key in the store; Name the part after its
	// history's directory, which a sealed object is bound to.
	Key, Name string
	History   string
	Kind      Kind
	// From and To are the revisions it holds: a snapshot's are both its
	// revision, as read from the snapshot's own database; a delta holds
	// every revision from From to To.
	From, To int64
	// First and Last bound when the archiver saw the revisions committed.
	// A snapshot's are both the time it was complete: every revision in it
	// was committed by then.
	First, Last time.Time
	Encoding
	Size int64
	// Modified is the store's time for the object.
	Modified time.Time
}

// HistoryID names one etcd cluster's history: its cluster ID. A restore
// makes a new cluster with a new ID, so revisions, which a restore and a
// re-created cluster number anew, are compared within one history only.
func HistoryID(clusterID uint64) string { return fmt.Sprintf("%016x", clusterID) }

// HistoryDir is the directory of one history under a backup's key.
func HistoryDir(base, history string) string { return base + Dir + history + "/" }

// The numbers in names are zero-padded to a fixed width, so that a
// store's listing, sorted by name, is sorted by revision and time.
const (
	revisionWidth = 20 // math.MaxInt64 has 19 digits
	millisWidth   = 13 // milliseconds since 1970, until the year 2286
)

// SnapshotName is "snap-<revision>-<unix ms complete>" and the encoding's
// suffixes.
func SnapshotName(revision int64, complete time.Time, enc Encoding) string {
	return fmt.Sprintf("snap-%0*d-%0*d%s", revisionWidth, revision, millisWidth, complete.UnixMilli(), enc.suffix())
}

// DeltaName is "delta-<from>-<to>-<unix ms first>-<unix ms last>" and the
// encoding's suffixes: the times let a restore to a moment pick its
// objects from the listing alone.
func DeltaName(from, to int64, first, last time.Time, enc Encoding) string {
	return fmt.Sprintf("delta-%0*d-%0*d-%0*d-%0*d%s", revisionWidth, from, revisionWidth, to,
		millisWidth, first.UnixMilli(), millisWidth, last.UnixMilli(), enc.suffix())
}

// ParseKey reads an object's key under base. ok is false for a key that
// is not a continuous backup's object of base, which is then left alone.
func ParseKey(base, key string) (o Object, ok bool) {
	rest, found := strings.CutPrefix(key, base+Dir)
	if !found {
		return o, false
	}
	history, name, found := strings.Cut(rest, "/")
	if !found || !validHistory(history) {
		return o, false
	}
	o = Object{Key: key, Name: name, History: history}
	stem := name
	if s, sealed := strings.CutSuffix(stem, ".sealed"); sealed {
		stem, o.Sealed = s, true
	}
	if s, compressed := strings.CutSuffix(stem, ".zst"); compressed {
		stem, o.Compressed = s, true
	}
	parts := strings.Split(stem, "-")
	var nums []int64
	for _, p := range parts[1:] {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return o, false
		}
		nums = append(nums, n)
	}
	switch {
	case parts[0] == "snap" && len(nums) == 2 && len(parts[1]) == revisionWidth && len(parts[2]) == millisWidth:
		o.Kind, o.From, o.To = KindSnapshot, nums[0], nums[0]
		o.First = time.UnixMilli(nums[1]).UTC()
		o.Last = o.First
	case parts[0] == "delta" && len(nums) == 4 && len(parts[1]) == revisionWidth && len(parts[2]) == revisionWidth &&
		len(parts[3]) == millisWidth && len(parts[4]) == millisWidth && nums[0] >= 1 && nums[0] <= nums[1] && nums[2] <= nums[3]:
		// Deltas are always compressed; a name that says otherwise was
		// not written by the archiver.
		if !o.Compressed {
			return o, false
		}
		o.Kind, o.From, o.To = KindDelta, nums[0], nums[1]
		o.First, o.Last = time.UnixMilli(nums[2]).UTC(), time.UnixMilli(nums[3]).UTC()
	default:
		return o, false
	}
	// The name must be the one the archiver writes for what it parsed to,
	// so that one object has one name.
	want := SnapshotName(o.From, o.First, o.Encoding)
	if o.Kind == KindDelta {
		want = DeltaName(o.From, o.To, o.First, o.Last, o.Encoding)
	}
	return o, name == want
}

func validHistory(h string) bool {
	if len(h) != 16 {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
