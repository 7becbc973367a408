package etcdcluster

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

func TestHousekeepingRecord(t *testing.T) {
	recovering := func(rec *v1beta2.HousekeepingStatus, ms ...membership.Member) *Observed {
		return hkCluster(policyOn, rec, nospaceAll(ms)...)
	}
	acted := func(o *Observed, a membership.Action) *Observed {
		o.Acted = &Outcome{Action: a}
		return o
	}
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   *v1beta2.HousekeepingStatus
	}{{
		name:   "nothing under way",
		reason: "a steady cluster's status has no housekeeping",
		in:     hkCluster(policyOn, nil, three([2]int64{10, 5}, [2]int64{10, 5}, [2]int64{10, 5})...),
	}, {
		name:   "compacted",
		reason: "the revision this sync compacted to",
		in:     acted(recovering(nil, three([2]int64{1001, 1001}, [2]int64{1001, 1001}, [2]int64{1001, 1001})...), membership.Action{Type: membership.ActionCompact, Revision: 500}),
		want:   &v1beta2.HousekeepingStatus{CompactedRevision: 500},
	}, {
		name:   "compacted again",
		reason: "a new compaction starts the defragmentations over",
		in: acted(recovering(&v1beta2.HousekeepingStatus{CompactedRevision: 400, Defragmented: []string{name(0)}},
			three([2]int64{1001, 1001}, [2]int64{1001, 1001}, [2]int64{1001, 1001})...), membership.Action{Type: membership.ActionCompact, Revision: 500}),
		want: &v1beta2.HousekeepingStatus{CompactedRevision: 500},
	}, {
		name:   "defragmentation started",
		reason: "the member this sync started on",
		in:     acted(hkCluster(policyOn, nil, three([2]int64{400, 100}, [2]int64{10, 5}, [2]int64{10, 5})...), membership.Action{Type: membership.ActionDefragment, Name: name(0)}),
		want:   &v1beta2.HousekeepingStatus{Defragmenting: name(0)},
	}, {
		name:   "a failed step",
		reason: "an action that failed started nothing",
		in: with(hkCluster(policyOn, nil, three([2]int64{400, 100}, [2]int64{10, 5}, [2]int64{10, 5})...), func(o *Observed) {
			o.Acted = &Outcome{Action: membership.Action{Type: membership.ActionDefragment, Name: name(0)}, Err: fmt.Errorf("refused")}
		}),
	}, {
		name:   "still defragmenting",
		reason: "the member does not answer: it is kept",
		in: with(hkCluster(policyOn, &v1beta2.HousekeepingStatus{Defragmenting: name(0)}, three([2]int64{400, 100}, [2]int64{10, 5}, [2]int64{10, 5})...), func(o *Observed) {
			o.Membership.Members[0] = down(o.Membership.Members[0])
		}),
		want: &v1beta2.HousekeepingStatus{Defragmenting: name(0)},
	}, {
		name:   "answers, still fragmented",
		reason: "it is kept: the planner starts it again, and nobody else",
		in:     hkCluster(policyOn, &v1beta2.HousekeepingStatus{Defragmenting: name(0)}, three([2]int64{400, 100}, [2]int64{10, 5}, [2]int64{10, 5})...),
		want:   &v1beta2.HousekeepingStatus{Defragmenting: name(0)},
	}, {
		name:   "seen done",
		reason: "the member answers with its space given back",
		in:     hkCluster(policyOn, &v1beta2.HousekeepingStatus{Defragmenting: name(0)}, three([2]int64{100, 100}, [2]int64{10, 5}, [2]int64{10, 5})...),
	}, {
		name:   "seen done in a NOSPACE recovery",
		reason: "it joins the members defragmented since the compaction, in name order",
		in: recovering(&v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmenting: name(0), Defragmented: []string{name(2)}},
			three([2]int64{900, 900}, [2]int64{1001, 1001}, [2]int64{5, 5})...),
		want: &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0), name(2)}},
	}, {
		name:   "seen done, and the next started",
		reason: "in the sync that starts the next member, the previous one is done",
		in: acted(recovering(&v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmenting: name(0)},
			three([2]int64{5, 5}, [2]int64{1001, 1001}, [2]int64{1001, 1001})...), membership.Action{Type: membership.ActionDefragment, Name: name(2)}),
		want: &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmenting: name(2), Defragmented: []string{name(0)}},
	}, {
		name:   "member gone",
		reason: "a member removed meanwhile is no longer waited for, nor listed",
		in: recovering(&v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmenting: "demo-gone", Defragmented: []string{"demo-gone2", name(0)}},
			three([2]int64{5, 5}, [2]int64{1001, 1001}, [2]int64{1001, 1001})...),
		want: &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0)}},
	}, {
		name:   "disarmed",
		reason: "the alarm disarmed ends the recovery",
		in: acted(recovering(&v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0), name(1), name(2)}},
			three([2]int64{5, 5}, [2]int64{5, 5}, [2]int64{5, 5})...), membership.Action{Type: membership.ActionDisarmAlarm}),
	}, {
		name:   "alarm gone",
		reason: "disarmed by a person: the recovery's record goes with it",
		in:     hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0)}}, three([2]int64{5, 5}, [2]int64{5, 5}, [2]int64{5, 5})...),
	}, {
		name:   "etcd not read",
		reason: "nothing is seen to end: the record is carried over as it was",
		in: with(hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmenting: name(1)}), func(o *Observed) {
			o.Membership = nil
		}),
		want: &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmenting: name(1)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, newPlanner(tt.in).housekeepingRecord()); diff != "" {
				t.Errorf("%s\nhousekeepingRecord() (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}

// TestNoSpaceRecoveryAfterAnEarlyDefragmentation replays the syncs of a
// recovery in which the first member's defragmentation came before the
// compaction had dropped the deleted keys on it, as in an e2e run that
// stalled: each sync plans from the status the previous one wrote, and
// each defragmentation is over by the next sync.
func TestNoSpaceRecoveryAfterAnEarlyDefragmentation(t *testing.T) {
	// What the members' files take, in MiB: before the compaction, and
	// once it has dropped the deleted keys.
	const full, data = 1010, 200
	files := []int64{full, full, full}
	early := map[string]bool{name(0): true}
	var rec *v1beta2.HousekeepingStatus
	var got []string
	for sync := 0; sync < 10; sync++ {
		o := hkCluster(policyOn, rec, nospaceAll(three([2]int64{files[0], files[0]}, [2]int64{files[1], files[1]}, [2]int64{files[2], files[2]}))...)
		p := newPlanner(o)
		views := p.viewMembers()
		step, _ := p.housekeeping(views, p.leaderView(views))
		a := step.action
		if a == nil {
			if step.blocked != nil {
				got = append(got, "blocked: "+step.blocked.message)
			}
			break
		}
		got = append(got, summarizeStep(step, true).Action)
		if a.Type == membership.ActionDefragment {
			i := int(a.MemberID) - 1
			if early[a.Name] {
				// It copies what the compaction was still to drop.
				early[a.Name] = false
			} else {
				files[i] = data
			}
		}
		o.Acted = &Outcome{Action: *a}
		rec = newPlanner(o).housekeepingRecord()
		if a.Type == membership.ActionDisarmAlarm {
			break
		}
	}
	want := []string{
		"compact 500",
		"defragment demo-m0", "defragment demo-m2", "defragment demo-m1", // followers first, the leader last
		"defragment demo-m0", // its file shows the first came too early
		"disarm-nospace demo-m1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("steps of the recovery (-want +got):\n%s", diff)
	}
}

// FuzzHousekeeping runs a cluster through syncs, the fuzz bytes deciding
// what happens between them: Pods turning unready and back (a probe may
// or may not fail while a member defragments), writes and deletes, the
// NOSPACE alarm, leadership moving, defragmentations that take several
// syncs or fail to start, compactions that drop the old revisions on a
// member some syncs after the hook asked (a defragmentation before that
// copies them). Each sync plans from the
// previous status, as the hook does, and the invariants are checked on
// every step it takes:
//   - no housekeeping action while a member is not ready or does not
//     answer;
//   - never a defragmentation while another member is being defragmented;
//   - the alarm disarmed only with every member's file under the level.
//
// Then the cluster is left alone for a while, every member ready: a
// NOSPACE alarm whose data fits must be gone by the end, unless every
// member's file is over the level from a defragmentation that came
// before its compaction was done (nothing etcd's Status shows tells that
// from data that does not fit), and no step is taken in the last syncs
// (no member is defragmented again and again).
func FuzzHousekeeping(f *testing.F) {
	f.Add([]byte{3, 0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100})
	f.Add([]byte{3, 1, 255, 0, 255, 0, 7, 7, 7, 7, 200, 13, 1, 2, 3})
	f.Add([]byte{5, 3, 9, 18, 27, 36, 45, 54, 63, 72, 81, 90, 99, 108, 117, 126})
	f.Add([]byte{1, 2, 100, 100, 100, 3, 3, 3, 3, 3, 3})
	f.Add([]byte{3, 0, 249, 0, 249, 1, 249, 2, 18, 0, 18, 1, 18, 2, 2, 2, 2, 2, 2, 2})
	// Three members filled to NOSPACE, a third of the data deleted; the
	// compaction after the delete takes 3 syncs on demo-m1, the first
	// follower, whose defragmentation comes before it is done.
	f.Add([]byte{2, 0, 249, 0, 137, 0, 0, 0, 0, 250, 0, 0, 3, 0, 7, 0, 4, 7, 0, 4, 7, 0, 4, 7, 0, 4, 7, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := fuzzBytes(data)
		type simMember struct {
			file, inUse, live int64 // MiB; inUse lags live after a compaction
			defragLeft        int   // syncs until its defragmentation ends; -1: none
			// compactLeft: syncs until the compaction the hook asked for
			// has dropped the old revisions on this member; -1: none runs.
			compactLeft int
			// early: its last defragmentation since that compaction came
			// before the compaction was done on it.
			early bool
			ready bool
		}
		n := int(next()%5) + 1
		policy := []*v1beta2.HousekeepingPolicy{policyOn, lowThreshold, noDefrag, noRecovery}[next()%4]
		members := make([]simMember, n)
		for i := range members {
			members[i] = simMember{file: 60, inUse: 50, live: 50, defragLeft: -1, compactLeft: -1, ready: true}
		}
		leader, nospace, revision := 0, false, int64(500)
		var rec *v1beta2.HousekeepingStatus
		const simQuota = 100 * mib
		const level = simQuota / mib * 80 / 100
		const rounds, settle, still = 60, 40, 10
		for round := 0; round < rounds+settle; round++ {
			quiet := round >= rounds
			// What happens between two syncs.
			if ev, i := next(), int(next())%n; !quiet {
				m := &members[i]
				switch ev % 8 {
				case 0:
					m.ready = !m.ready
				case 1: // writes, refused under NOSPACE
					if !nospace {
						revision++
						for j := range members {
							sm := &members[j]
							sm.live += int64(ev>>3) + 1
							sm.inUse += int64(ev>>3) + 1
							sm.file = max(sm.file, sm.inUse)
							nospace = nospace || sm.file*mib >= simQuota
						}
					}
				case 2: // deletes: the pages come back after compaction
					revision++
					for j := range members {
						members[j].live = max(members[j].live-int64(ev>>3), 1)
					}
				case 3:
					leader = i
				case 4: // etcd's own compaction, writes coming: in use follows
					if !nospace {
						for j := range members {
							members[j].inUse = members[j].live
						}
					}
				}
			} else {
				for j := range members {
					members[j].ready = true
				}
			}

			o := hkCluster(policy, rec)
			o.Cluster.Spec.Size = n
			o.Cluster.Spec.Etcd.QuotaBackendBytes = simQuota
			var alarms []string
			if nospace {
				alarms = []string{nospaceOf(1)}
			}
			for j, sm := range members {
				mem := sized(member(uint64(j+1), name(j)), sm.file, sm.inUse)
				mem.Errors, mem.Revision = alarms, revision
				if sm.defragLeft >= 0 {
					// A member being defragmented does not answer Status
					// (etcd 3.4 to 3.6); its probe may pass or fail.
					mem = down(mem)
				}
				o.Membership.Members = append(o.Membership.Members, mem)
				o.Pods[name(j)] = memberPod(name(j), "Running", sm.ready)
			}
			o.Membership.LeaderID = uint64(leader + 1)

			p := newPlanner(o)
			views := p.viewMembers()
			step, _ := p.housekeeping(views, p.leaderView(views))
			if a := step.action; a != nil {
				if round >= rounds+settle-still {
					t.Errorf("round %d: %s after %d quiet syncs (record %+v, members %+v)", round, a, round-rounds, rec, members)
				}
				for j, sm := range members {
					if !sm.ready || sm.defragLeft >= 0 {
						t.Fatalf("round %d: %s while member %s is ready=%v, defragmenting=%v", round, a, name(j), sm.ready, sm.defragLeft >= 0)
					}
				}
				var err error
				switch a.Type {
				case membership.ActionDefragment:
					target := &members[int(a.MemberID)-1]
					switch outcome := next() % 8; {
					case quiet:
						target.defragLeft = 0
					case outcome <= 1:
						// Refused, or never reached the member: the hook
						// tells that from one that runs on (see etcdclient).
						err = fmt.Errorf("refused")
					default:
						target.defragLeft = int(outcome % 4)
					}
				case membership.ActionCompact:
					// The pages freed show as unused only after the next
					// write, which NOSPACE refuses. Each member drops the
					// old revisions in the background, in its own time.
					for j := range members {
						members[j].compactLeft, members[j].early = int(next()%4), false
					}
				case membership.ActionDisarmAlarm:
					for j, sm := range members {
						if sm.file >= level {
							t.Fatalf("round %d: alarm disarmed with member %s's file at %d MiB, over %d", round, name(j), sm.file, level)
						}
					}
					nospace = false
				}
				o.Acted = &Outcome{Action: *a, Err: err}
			}
			rec = newPlanner(o).housekeepingRecord()

			// Defragmentations and compactions run on between syncs.
			for j := range members {
				sm := &members[j]
				switch {
				case sm.defragLeft != 0:
				case sm.compactLeft > 0:
					// The rewrite copies what the compaction was still to
					// drop: as full as before, all of it in use.
					sm.file, sm.early = sm.inUse, true
				default:
					sm.file, sm.inUse, sm.early = sm.live, sm.live, false
				}
				if sm.defragLeft >= 0 {
					sm.defragLeft--
				}
				if sm.compactLeft >= 0 {
					sm.compactLeft--
				}
			}
		}
		fits, allEarly := true, true
		for _, sm := range members {
			fits = fits && sm.live < level
			allEarly = allEarly && sm.early && sm.file >= level
		}
		if nospace && fits && policy.RecoversNoSpace() && !allEarly {
			t.Errorf("the NOSPACE alarm stands after %d quiet syncs, though every member's data fits (record %+v, members %+v)", settle, rec, members)
		}
	})
}
