package etcdcluster

import (
	"slices"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// Which member a defragmentation goes to, and when: a member whose file
// holds space its data does not take, one member at a time, followers
// first and the leader last, and only once every member is a ready voter
// that has caught up (see housekeeping.go for the whole policy).
// minReclaim is how much unused space a member's file may hold and still
// look freshly defragmented: a few pages are left unused by the rewrite,
// never this much.
const minReclaim = 1 << 20

// defragNeeded reports whether a member that answered is due for a
// defragmentation. In a NOSPACE recovery: its file is over the disarm
// level, and it was not defragmented since the compaction (its size in
// use cannot tell: see HousekeepingStatus.Defragmented) or it was too
// early (see defragmentedEarly). Otherwise: its unused space passes the
// policy's thresholds.
func (p *planner) defragNeeded(m membership.Member, recovering bool, rec v1beta2.HousekeepingStatus) bool {
	if !m.Reachable {
		return false
	}
	if recovering {
		if m.DBSize < p.disarmLevel() {
			return false
		}
		return !slices.Contains(rec.Defragmented, membership.MemberName(m, p.o.Cluster.Name)) || p.defragmentedEarly(m) != ""
	}
	return p.fragmented(m)
}

// defragmentedEarly says how a member defragmented since the compaction,
// whose file is still over the disarm level, shows that its
// defragmentation came before the compaction had dropped the old
// revisions on it, or "" when it does not: its file has 1 MiB unused
// again (the compaction went on after the rewrite), or is 1 MiB larger
// than another member's, which holds the same data. The margin because
// two rewrites of the same data may differ by a few pages: a member taken
// again for those would be taken again forever. A rewrite that comes
// after the compaction leaves neither, so a member is taken again only
// while its compaction was not done.
func (p *planner) defragmentedEarly(m membership.Member) string {
	if m.DBSize-m.DBSizeInUse >= minReclaim {
		return "its file has space unused again"
	}
	var smallest *membership.Member
	for i, o := range p.o.Membership.Members {
		if o.Reachable && o.DBSize > 0 && o.ID != m.ID && (smallest == nil || o.DBSize < smallest.DBSize) {
			smallest = &p.o.Membership.Members[i]
		}
	}
	if smallest != nil && m.DBSize-smallest.DBSize >= minReclaim {
		return "its file is larger than that of member " + membership.MemberName(*smallest, p.o.Cluster.Name) + ", which holds the same data"
	}
	return ""
}

// fragmented: the member's unused space passes the policy's thresholds.
func (p *planner) fragmented(m membership.Member) bool {
	pol := p.spec.Housekeeping.WithDefaults()
	if !pol.Defragments() {
		return false
	}
	unused := m.DBSize - m.DBSizeInUse
	return unused >= pol.DefragmentMinUnusedBytes && unused*100 >= m.DBSize*int64(pol.DefragmentUnusedPercent)
}

// looksDefragmented: the member answers, and its file no longer holds
// what its defragmentation was to give back.
func (p *planner) looksDefragmented(m membership.Member, recovering bool) bool {
	if !m.Reachable {
		return false
	}
	if recovering {
		return m.DBSize-m.DBSizeInUse < minReclaim || m.DBSize < p.disarmLevel()
	}
	return !p.fragmented(m)
}
func (p *planner) defragment(v memberView, reason string) membership.Action {
	return membership.Action{Type: membership.ActionDefragment, Name: v.name, MemberID: v.ID, Endpoint: p.clientEndpoint(v), Reason: reason}
}

// defragOrder lists the members due for a defragmentation in the order
// they are taken: the one status.housekeeping names first (it was started
// and is seen not done: it is started again), then followers by name, the
// leader last. In a NOSPACE recovery every member over the level has its
// turn before any is taken again (see defragmentedEarly): the later a
// rewrite comes after the compaction, the likelier the compaction is done,
// so the last ones, the leader's above all, show what the data takes.
func (p *planner) defragOrder(views []memberView, leader memberView, inFlight *memberView, recovering bool, rec v1beta2.HousekeepingStatus) []memberView {
	due := func(v memberView) bool { return p.defragNeeded(v.Member, recovering, rec) }
	if recovering {
		firstTurn := func(v memberView) bool { return due(v) && !slices.Contains(rec.Defragmented, v.name) }
		if out := orderDue(views, leader, inFlight, firstTurn); len(out) > 0 {
			return out
		}
	}
	return orderDue(views, leader, inFlight, due)
}

func orderDue(views []memberView, leader memberView, inFlight *memberView, due func(memberView) bool) []memberView {
	var out []memberView
	if inFlight != nil && due(*inFlight) {
		out = append(out, *inFlight)
	}
	var leaderDue *memberView
	for i, v := range views {
		switch {
		case inFlight != nil && v.ID == inFlight.ID, !due(v):
		case v.ID == leader.ID:
			leaderDue = &views[i]
		default:
			out = append(out, v)
		}
	}
	if leaderDue != nil {
		out = append(out, *leaderDue)
	}
	return out
}

func memberViewNamed(views []memberView, name string) *memberView {
	if name == "" {
		return nil
	}
	for i, v := range views {
		if v.name == name {
			return &views[i]
		}
	}
	return nil
}

// housekeepingGate says why no housekeeping step may be taken now, or "".
func housekeepingGate(views []memberView, leader memberView) string {
	for _, v := range views {
		switch {
		case v.IsLearner:
			return "learner " + v.name + " is not yet a voting member"
		case !v.ready:
			return "member " + v.name + " is not ready"
		case !v.Reachable:
			return "member " + v.name + " does not answer"
		case !appliedCaughtUp(v.Member, leader.Member):
			return "member " + v.name + " has not caught up with the leader"
		}
	}
	return ""
}

// appliedCaughtUp: the member has applied the leader's log, or near
// enough. A member that was just defragmented received entries meanwhile
// and applies them before it has caught up. Releases before 3.4 report no
// applied index: their committed index stands in.
func appliedCaughtUp(m, leader membership.Member) bool {
	applied := m.RaftAppliedIndex
	if applied == 0 {
		applied = m.RaftIndex
	}
	return m.Reachable && leader.Reachable && leader.RaftIndex > 0 && applied+maxRestartLag >= leader.RaftIndex
}
