package v1beta2

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// HousekeepingPolicy is the opt-in auto-pilot for etcd's database. Without
// it (spec.housekeeping unset) the hook still reports etcd's alarms in
// status, and changes nothing about them. Setting it, even to {}, turns on
// both tasks below with their defaults; each can be turned off alone.
//
// Each step is one sync's action, taken only when every member is ready,
// answers and has caught up with the leader, and after any scaling,
// upgrade or rollout: see docs/etcdcluster.md, "Housekeeping (auto-pilot)".
type HousekeepingPolicy struct {
	// RecoverNoSpace: when etcd raises its NOSPACE alarm (a member's
	// database reached spec.etcd.quotaBackendBytes, and etcd refuses every
	// write), compact the history to the current revision, defragment the
	// members one at a time (followers first, the leader last), and disarm
	// the alarm once every member's database file is under 80% of the
	// quota. Keys must have been deleted first, by whoever owns them, if
	// the data itself does not fit: the status says so. Default: true.
	// +optional
	RecoverNoSpace *bool `json:"recoverNoSpace,omitempty"`

	// Defragment: defragment a member whose database file holds more
	// unused space (dbSize - dbSizeInUse, the pages that only a
	// defragmentation gives back) than both thresholds below. One member
	// at a time, followers first and the leader last. A member does not
	// serve while it is defragmented, for a time that grows with its data
	// (64 MiB in use: about a second on a local disk). Default: true.
	// +optional
	Defragment *bool `json:"defragment,omitempty"`

	// DefragmentUnusedPercent is the share of a member's database file
	// that must be unused before it is defragmented. Default: 50, the
	// etcd mixin's "high fragmentation" alert.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	DefragmentUnusedPercent int32 `json:"defragmentUnusedPercent,omitempty"`

	// DefragmentMinUnusedBytes is how much unused space a member's
	// database file must also hold before it is defragmented, so that a
	// small database is left alone. Default: 104857600 (100 MiB), the
	// etcd mixin's floor; at least 1048576 (1 MiB).
	// +kubebuilder:validation:Minimum=1048576
	// +optional
	DefragmentMinUnusedBytes int64 `json:"defragmentMinUnusedBytes,omitempty"`
}

// Defaults of HousekeepingPolicy; see its fields.
const (
	DefaultDefragmentUnusedPercent  int32 = 50
	DefaultDefragmentMinUnusedBytes int64 = 100 << 20
	// MinDefragmentMinUnusedBytes keeps a tiny database, whose unused share
	// swings with every write, from being defragmented over and over.
	MinDefragmentMinUnusedBytes int64 = 1 << 20
	// NoSpaceDisarmPercent is how full, in percent of the quota, every
	// member's database file may be when the NOSPACE alarm is disarmed:
	// below the quota with room to spare, so that the next writes do not
	// raise it again at once.
	NoSpaceDisarmPercent = 80
)

// WithDefaults fills in the defaults. A nil policy stays nil: housekeeping
// is off.
func (h *HousekeepingPolicy) WithDefaults() *HousekeepingPolicy {
	if h == nil {
		return nil
	}
	out := *h
	on := true
	if out.RecoverNoSpace == nil {
		out.RecoverNoSpace = &on
	}
	if out.Defragment == nil {
		out.Defragment = &on
	}
	if out.DefragmentUnusedPercent == 0 {
		out.DefragmentUnusedPercent = DefaultDefragmentUnusedPercent
	}
	if out.DefragmentMinUnusedBytes == 0 {
		out.DefragmentMinUnusedBytes = DefaultDefragmentMinUnusedBytes
	}
	return &out
}

// RecoversNoSpace reports whether the policy recovers from NOSPACE; false
// for a nil policy.
func (h *HousekeepingPolicy) RecoversNoSpace() bool {
	return h != nil && (h.RecoverNoSpace == nil || *h.RecoverNoSpace)
}

// Defragments reports whether the policy defragments fragmented members;
// false for a nil policy.
func (h *HousekeepingPolicy) Defragments() bool {
	return h != nil && (h.Defragment == nil || *h.Defragment)
}

// validate repeats the schema's ranges, and refuses housekeeping on
// releases that do not report the size in use (dbSizeInUse arrived in
// etcd 3.4): without it every file would look all unused, and be
// defragmented over and over.
func (h *HousekeepingPolicy) validate(path *field.Path, version string) field.ErrorList {
	if h == nil {
		return nil
	}
	var errs field.ErrorList
	if p := h.DefragmentUnusedPercent; p != 0 && (p < 1 || p > 99) {
		errs = append(errs, field.Invalid(path.Child("defragmentUnusedPercent"), p, "must be between 1 and 99"))
	}
	if b := h.DefragmentMinUnusedBytes; b != 0 && b < MinDefragmentMinUnusedBytes {
		errs = append(errs, field.Invalid(path.Child("defragmentMinUnusedBytes"), b, fmt.Sprintf("must be at least %d (1 MiB)", MinDefragmentMinUnusedBytes)))
	}
	if v, ok := parseSemver(version); ok && v[0] == 3 && v[1] < 4 {
		errs = append(errs, field.Invalid(path, "set", "etcd "+version+" does not report how much of its database is in use (3.4 and later do), which housekeeping needs"))
	}
	return errs
}

// HousekeepingStatus is the housekeeping under way, as the hook last
// started it. The next syncs read it back: it is how the hook knows, from
// what it observes, which member it is defragmenting, and that the history
// was compacted for the NOSPACE recovery. It is gone when nothing is under
// way.
type HousekeepingStatus struct {
	// CompactedRevision is the revision the NOSPACE recovery compacted the
	// history to; a newer revision (keys deleted since) is compacted again.
	// +optional
	CompactedRevision int64 `json:"compactedRevision,omitempty"`

	// Defragmenting is the member whose defragmentation the hook started
	// and has not yet seen end: until the member answers again with its
	// unused space given back, no other member is defragmented.
	// +optional
	Defragmenting string `json:"defragmenting,omitempty"`

	// Defragmented are the members the NOSPACE recovery defragmented since
	// it compacted to CompactedRevision. Their files then show what their
	// data takes, unless the defragmentation came before etcd had finished
	// the compaction on that member (it drops old revisions in the
	// background, in batches): a member still over 80% of the quota whose
	// file shows unused space, or is larger than another member's, is
	// defragmented again; one that shows neither holds more than fits.
	// (Until a member writes again after a compaction, etcd counts the
	// pages it freed as in use: only a defragmentation shows what the data
	// takes while NOSPACE refuses writes.)
	// +optional
	Defragmented []string `json:"defragmented,omitempty"`
}
