package membership

import (
	"net/url"
	"strings"
)

// Membership is the cluster as etcd reported it in this sync.
type Membership struct {
	Members []Member
	// LeaderID is 0 when no reachable member knows a leader.
	LeaderID uint64
	// Stale is set when no quorum answered and the list is one member's
	// local view. It is good enough to report, never to act on.
	Stale bool
	// ClusterID is etcd's ID of the cluster that answered; 0 if unknown.
	ClusterID uint64
}

// Member is one etcd member, with what its own endpoint said about it.
type Member struct {
	ID uint64
	// Name is empty until the member has started; see MemberName.
	Name       string
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool

	// Reachable is true when the member answered a status request in this
	// sync; the fields below are only meaningful then.
	Reachable bool
	Version   string
	// RaftIndex is the member's raft log index, used to tell whether a
	// learner has caught up with the leader.
	RaftIndex uint64
	// RaftAppliedIndex is how far the member has applied its log (etcd
	// 3.4 and later; 0 before). A member that was defragmented applies
	// what it received meanwhile before it has caught up.
	RaftAppliedIndex uint64
	// Revision is the store's revision as the member has applied it: what
	// a compaction compacts to.
	Revision int64
	// Errors are alarms or errors the member reported about itself.
	Errors []string
	// DBSize is the size of the member's database file and DBSizeInUse
	// the part of it that holds data (etcd 3.4 and later; 0 before): the
	// rest is free pages that only a defragmentation gives back.
	DBSize, DBSizeInUse int64
	// StorageVersion is the release line the member's database is written
	// for ("3.6.0"; etcd 3.6 and later, empty before). It follows the
	// cluster version, so in a downgrade it says when a member's data can
	// be opened by the lower release.
	StorageVersion string
	// DowngradeTarget is the version etcd's downgrade is enabled for, as
	// the member knows it ("3.6.0"), or empty when none is (etcd 3.6 and
	// later).
	DowngradeTarget string
}

// Started reports whether the member has ever run: etcd fills in a member's
// name when it first joins.
func (m Member) Started() bool { return m.Name != "" }

// Voters are the voting members: every member but the learners.
func (ms *Membership) Voters() []Member {
	var out []Member
	for _, m := range ms.Members {
		if !m.IsLearner {
			out = append(out, m)
		}
	}
	return out
}

// VoterCount is len(ms.Voters()), without copying the members: the
// quorum rules count voters many times a sync.
func (ms *Membership) VoterCount() int {
	n := 0
	for _, m := range ms.Members {
		if !m.IsLearner {
			n++
		}
	}
	return n
}

// WithMembers is the membership after a change: etcd's new list, with what
// each surviving member said about itself earlier in this sync.
func (ms *Membership) WithMembers(members []Member) *Membership {
	seen := make(map[uint64]Member, len(ms.Members))
	for _, m := range ms.Members {
		seen[m.ID] = m
	}
	out := &Membership{LeaderID: ms.LeaderID, ClusterID: ms.ClusterID, Members: make([]Member, 0, len(members))}
	for _, m := range members {
		if old, ok := seen[m.ID]; ok {
			m.Reachable, m.Version, m.RaftIndex, m.Errors = old.Reachable, old.Version, old.RaftIndex, old.Errors
			m.DBSize, m.DBSizeInUse = old.DBSize, old.DBSizeInUse
			m.RaftAppliedIndex, m.Revision = old.RaftAppliedIndex, old.Revision
			m.StorageVersion, m.DowngradeTarget = old.StorageVersion, old.DowngradeTarget
			if m.Name == "" {
				m.Name = old.Name
			}
		}
		out.Members = append(out.Members, m)
	}
	return out
}

// MemberName recovers a member's name. A member that was added but has not
// started yet has an empty name in etcd's member list; its peer URL still
// carries the name as the first DNS label, which is how a restarted hook
// recognises it.
func MemberName(m Member, cluster string) string {
	if m.Name != "" {
		return m.Name
	}
	for _, raw := range m.PeerURLs {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		label, _, _ := strings.Cut(u.Hostname(), ".")
		return label
	}
	return ""
}
