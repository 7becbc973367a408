package membership

// These rules mirror etcd's own reconfiguration checks (strict reconfig
// check): a change is allowed only if, once it is made, a quorum of the
// voting members is still up. Here "up" means the member answered this
// sync's status request, which is stricter than etcd's "has ever started".

// Quorum is the number of voters that must agree for the cluster to commit.
func Quorum(voters int) int { return voters/2 + 1 }

// healthyVoters counts the voting members that answered in this sync,
// leaving out the member with ID except (0 leaves out nobody).
func healthyVoters(ms *Membership, except uint64) int {
	n := 0
	for _, m := range ms.Members {
		if !m.IsLearner && m.Reachable && m.ID != except {
			n++
		}
	}
	return n
}

// HasQuorum reports whether a quorum of the voters is up.
func HasQuorum(ms *Membership) bool {
	voters := ms.VoterCount()
	return voters > 0 && healthyVoters(ms, 0) >= Quorum(voters)
}

// CanAddVoter reports whether a new voting member may be added: the new
// member counts toward the quorum size but is not up yet, so the members
// that are up must already form a quorum of the larger cluster. This is the
// check that makes a plain 1 → 2 growth unsafe and a learner safe.
//
// Like etcd, it allows the one exception of a single started member taking
// a second: there is no other way to grow a one-member cluster without
// learners, and etcd itself accepts it.
func CanAddVoter(ms *Membership) bool {
	up, voters := healthyVoters(ms, 0), ms.VoterCount()
	if up == 1 && voters == 1 {
		return true
	}
	return up >= Quorum(voters+1)
}

// CanPromote reports whether learner id may become a voter: as for an add,
// except that the learner itself is up and counts.
func CanPromote(ms *Membership, id uint64) bool {
	learnerUp := 0
	for _, m := range ms.Members {
		if m.ID == id && m.IsLearner && m.Reachable {
			learnerUp = 1
		}
	}
	return healthyVoters(ms, 0)+learnerUp >= Quorum(ms.VoterCount()+1)
}

// CanRemove reports whether member id may be removed without leaving the
// remaining voters short of a quorum. A learner never counts toward quorum,
// and the last voter is never removed.
func CanRemove(ms *Membership, id uint64) bool {
	var target *Member
	for i := range ms.Members {
		if ms.Members[i].ID == id {
			target = &ms.Members[i]
		}
	}
	if target == nil {
		return false
	}
	if target.IsLearner {
		return true
	}
	remaining := ms.VoterCount() - 1
	if remaining < 1 {
		return false
	}
	return healthyVoters(ms, id) >= Quorum(remaining)
}

// LearnerCaughtUp reports whether a learner's log is close enough to the
// leader's to be promoted. etcd refuses a promotion below 90% of the
// leader's progress, so asking earlier only produces an error.
func LearnerCaughtUp(learner, leader Member) bool {
	if !learner.Reachable || !leader.Reachable || leader.RaftIndex == 0 {
		return false
	}
	return learner.RaftIndex*10 >= leader.RaftIndex*9
}

// HealthyVoters counts the voting members that answered in this sync.
func HealthyVoters(ms *Membership) int { return healthyVoters(ms, 0) }
