package membership

import "testing"

func TestQuorumRules(t *testing.T) {
	three := membership(1, member(1, "a"), member(2, "b"), member(3, "c"))
	oneDown := membership(1, member(1, "a"), member(2, "b"), down(member(3, "c")))
	twoDown := membership(1, member(1, "a"), down(member(2, "b")), down(member(3, "c")))
	single := membership(1, member(1, "a"))
	withLearner := membership(1, member(1, "a"), learner(2, "b", 10))
	tests := []struct {
		name   string
		reason string
		got    bool
		want   bool
	}{
		{"quorum of 3 is 2", "", Quorum(3) == 2, true},
		{"quorum of 4 is 3", "an even size tolerates no more failures than the odd size below it", Quorum(4) == 3, true},
		{"healthy three has quorum", "", HasQuorum(three), true},
		{"one down keeps quorum", "", HasQuorum(oneDown), true},
		{"two down loses quorum", "", HasQuorum(twoDown), false},
		{"remove healthy member of three", "two healthy remain, quorum of 2 is 2", CanRemove(three, 2), true},
		{"remove down member of three", "two healthy remain", CanRemove(oneDown, 3), true},
		{"remove healthy member with one down", "one healthy would remain of 2 voters, quorum 2", CanRemove(oneDown, 2), false},
		{"never remove the last voter", "", CanRemove(single, 1), false},
		{"learner always removable", "it never counts toward quorum", CanRemove(withLearner, 2), true},
		{"unknown member not removable", "", CanRemove(three, 42), false},
		{"add voter to healthy three", "3 up >= quorum(4)=3", CanAddVoter(three), true},
		{"add voter with one of three down", "2 up < quorum(4)=3: the new voter not starting would lose quorum", CanAddVoter(oneDown), false},
		{"add voter to a single member", "etcd's own exception for growing 1 to 2", CanAddVoter(single), true},
		{"promote up learner", "2 up >= quorum(2)", CanPromote(withLearner, 2), true},
		{"promote down learner", "", CanPromote(membership(1, member(1, "a"), down(learner(2, "b", 10))), 2), false},
		{"caught up at 90%", "", LearnerCaughtUp(learner(2, "b", 90), member(1, "a")), true},
		{"behind at 89%", "", LearnerCaughtUp(learner(2, "b", 89), member(1, "a")), false},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v (%s)", tt.name, tt.got, tt.want, tt.reason)
		}
	}
}

func TestMemberNameFromPeerURL(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		member Member
		want   string
	}{
		{"started", "etcd reports the name", Member{Name: "demo-abcde", PeerURLs: []string{"http://x.demo.prod.svc:2380"}}, "demo-abcde"},
		{"unstarted", "the first DNS label of the peer URL is the name", Member{PeerURLs: []string{"http://demo-fghjk.demo.prod.svc:2380"}}, "demo-fghjk"},
		{"unparseable", "", Member{PeerURLs: []string{"::"}}, ""},
	}
	for _, tt := range tests {
		if got := MemberName(tt.member, "demo"); got != tt.want {
			t.Errorf("%s: MemberName = %q, want %q (%s)", tt.name, got, tt.want, tt.reason)
		}
	}
}

// member is a started voter that answered this sync.
func member(id uint64, name string) Member {
	return Member{ID: id, Name: name, Reachable: true, Version: "3.6.16", RaftIndex: 100}
}

func learner(id uint64, name string, raftIndex uint64) Member {
	m := member(id, name)
	m.IsLearner, m.RaftIndex = true, raftIndex
	return m
}

func down(m Member) Member {
	m.Reachable, m.Version, m.RaftIndex = false, "", 0
	return m
}

func membership(leader uint64, members ...Member) *Membership {
	return &Membership{Members: members, LeaderID: leader}
}
