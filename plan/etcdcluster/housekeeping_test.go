package etcdcluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

const mib = 1 << 20

// testQuota is the quota of the housekeeping tests' clusters: its disarm
// level is 800 MiB.
const testQuota = 1000 * mib

// sized is a member whose database file is dbMiB large, inUseMiB of it in
// use, at store revision 500.
func sized(m membership.Member, dbMiB, inUseMiB int64) membership.Member {
	m.DBSize, m.DBSizeInUse = dbMiB*mib, inUseMiB*mib
	m.RaftAppliedIndex, m.Revision = m.RaftIndex, 500
	return m
}

func withAlarm(m membership.Member, alarms ...string) membership.Member {
	m.Errors = append(m.Errors, alarms...)
	return m
}

func nospaceOf(id uint64) string { return fmt.Sprintf("memberID:%d alarm:NOSPACE ", id) }
func corruptOf(id uint64) string { return fmt.Sprintf("memberID:%d alarm:CORRUPT ", id) }

// hkCluster is a running cluster of ready members, demo-m1 the leader,
// with the given housekeeping policy, spec.etcd's quota testQuota, and
// the previous status.housekeeping rec.
func hkCluster(policy *v1beta2.HousekeepingPolicy, rec *v1beta2.HousekeepingStatus, members ...membership.Member) *Observed {
	c := newCluster(len(members), "3.6.16")
	c.Status.Phase = v1beta2.PhaseRunning
	c.Spec.Etcd = &v1beta2.EtcdSettings{QuotaBackendBytes: testQuota}
	c.Spec.Housekeeping = policy
	c.Status.Housekeeping = rec
	o := observed(c)
	o.Membership = memberList(2, members...)
	for _, m := range members {
		o.Pods[membership.MemberName(m, testCluster)] = readyPod(membership.MemberName(m, testCluster))
	}
	return o
}

// three are demo-m0..2 (IDs 1..3), sized as given in MiB (file, in use).
func three(sizes ...[2]int64) []membership.Member {
	out := make([]membership.Member, len(sizes))
	for i, s := range sizes {
		out[i] = sized(member(uint64(i+1), name(i)), s[0], s[1])
	}
	return out
}

func newPlanner(o *Observed) *planner {
	return &planner{o: o, spec: o.Cluster.Spec.WithDefaults()}
}

type hkSummary struct {
	Action   string // "<type> <member>", "compact <revision>"
	Reason   string // Progressing's reason
	Blocked  string // the problem's reason
	Resolved bool   // the rung had something to say
	Resync   time.Duration
}

func summarizeStep(step stepResult, ok bool) hkSummary {
	s := hkSummary{Reason: step.progressing.reason, Resolved: ok}
	if step.action == nil && step.progressing.reason == "" {
		s.Resync = step.resync
	}
	if a := step.action; a != nil {
		s.Action = string(a.Type) + " " + a.Name
		if a.Type == membership.ActionCompact {
			s.Action = fmt.Sprintf("compact %d", a.Revision)
		}
	}
	if step.blocked != nil {
		s.Blocked = step.blocked.reason
	}
	return s
}

var (
	policyOn     = &v1beta2.HousekeepingPolicy{}
	noRecovery   = &v1beta2.HousekeepingPolicy{RecoverNoSpace: ptrTo(false)}
	noDefrag     = &v1beta2.HousekeepingPolicy{Defragment: ptrTo(false)}
	lowThreshold = &v1beta2.HousekeepingPolicy{DefragmentUnusedPercent: 30, DefragmentMinUnusedBytes: 10 * mib}
)

func ptrTo[T any](v T) *T { return &v }

func TestHousekeepingStep(t *testing.T) {
	fragmented := [2]int64{400, 100} // 75% and 300 MiB unused: over the defaults
	tidy := [2]int64{400, 390}
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   hkSummary
		// wantMessage is part of the Progressing condition's message.
		wantMessage string
	}{{
		name:   "no policy",
		reason: "housekeeping is opt-in: fragmented members are left alone",
		in:     hkCluster(nil, nil, three(fragmented, fragmented, fragmented)...),
		want:   hkSummary{},
	}, {
		name:   "no policy, near the quota",
		reason: "a member's file is over 80% of the quota: the cluster is looked at again soon, for an alarm would change no object",
		in:     hkCluster(nil, nil, three([2]int64{850, 850}, tidy, tidy)...),
		want:   hkSummary{Resolved: true, Resync: resyncNearQuota},
	}, {
		name:   "NOSPACE, no policy",
		reason: "the alarm is reported (alarmProblems), nothing is done, and the cluster is looked at again soon",
		in:     hkCluster(nil, nil, nospaceAll(three([2]int64{1001, 1001}, [2]int64{1001, 1001}, [2]int64{1001, 1001}))...),
		want:   hkSummary{Resolved: true, Resync: resyncNearQuota},
	}, {
		name:   "nothing to do",
		reason: "no member passes the thresholds",
		in:     hkCluster(policyOn, nil, three(tidy, tidy, tidy)...),
		want:   hkSummary{},
	}, {
		name:        "followers first",
		reason:      "every member is fragmented: the first follower by name goes first",
		in:          hkCluster(policyOn, nil, three(fragmented, fragmented, fragmented)...),
		want:        hkSummary{Action: "defragment demo-m0", Reason: ReasonDefragmenting, Resolved: true},
		wantMessage: "defragmenting member demo-m0: 75% of its database file is unused",
	}, {
		name:   "the leader last",
		reason: "the leader is fragmented as well as demo-m2: demo-m2 goes first",
		in:     hkCluster(policyOn, nil, three(tidy, fragmented, fragmented)...),
		want:   hkSummary{Action: "defragment demo-m2", Reason: ReasonDefragmenting, Resolved: true},
	}, {
		name:   "the leader alone",
		reason: "leadership need not move for a defragmentation: the leader is taken when its turn comes",
		in:     hkCluster(policyOn, nil, three(tidy, fragmented, tidy)...),
		want:   hkSummary{Action: "defragment demo-m1", Reason: ReasonDefragmenting, Resolved: true},
	}, {
		name:   "under the percentage",
		reason: "40% unused is under the default 50%, however much that is",
		in:     hkCluster(policyOn, nil, three([2]int64{700, 420}, tidy, tidy)...),
		want:   hkSummary{},
	}, {
		name:   "under the minimum",
		reason: "90% unused of a 50 MiB file is 45 MiB: under the default 100 MiB",
		in:     hkCluster(policyOn, nil, three([2]int64{50, 5}, tidy, tidy)...),
		want:   hkSummary{},
	}, {
		name:   "thresholds of the policy",
		reason: "35% and 35 MiB unused pass thresholds of 30% and 10 MiB",
		in:     hkCluster(lowThreshold, nil, three([2]int64{100, 65}, tidy, tidy)...),
		want:   hkSummary{Action: "defragment demo-m0", Reason: ReasonDefragmenting, Resolved: true},
	}, {
		name:   "defragmentation off",
		reason: "the policy turns defragmentation off and there is no alarm",
		in:     hkCluster(noDefrag, nil, three(fragmented, fragmented, fragmented)...),
		want:   hkSummary{},
	}, {
		name:   "a member not ready",
		reason: "never while another member is out",
		in: with(hkCluster(policyOn, nil, three(fragmented, tidy, tidy)...), func(o *Observed) {
			o.Pods[name(2)] = memberPod(name(2), "Running", false)
		}),
		want:        hkSummary{Reason: ReasonDefragmenting, Resolved: true},
		wantMessage: "housekeeping waits: member demo-m2 is not ready",
	}, {
		name:   "a member that does not answer",
		reason: "a ready Pod whose member does not answer Status may be under a defragmentation nobody recorded",
		in: with(hkCluster(policyOn, nil, three(fragmented, tidy, tidy)...), func(o *Observed) {
			o.Membership.Members[2] = down(o.Membership.Members[2])
		}),
		want:        hkSummary{Reason: ReasonDefragmenting, Resolved: true},
		wantMessage: "housekeeping waits: member demo-m2 does not answer",
	}, {
		name:   "a member that has not applied what it received",
		reason: "a member just defragmented applies the entries it received meanwhile before it counts",
		in: with(hkCluster(policyOn, nil, three(fragmented, tidy, tidy)...), func(o *Observed) {
			for i := range o.Membership.Members {
				o.Membership.Members[i].RaftIndex, o.Membership.Members[i].RaftAppliedIndex = 5000, 5000
			}
			o.Membership.Members[2].RaftAppliedIndex = 5000 - maxRestartLag - 1
		}),
		want:        hkSummary{Reason: ReasonDefragmenting, Resolved: true},
		wantMessage: "housekeeping waits: member demo-m2 has not caught up with the leader",
	}, {
		name:   "a learner",
		reason: "a learner is a scaling step under way",
		in: with(hkCluster(policyOn, nil, three(fragmented, tidy, tidy)...), func(o *Observed) {
			o.Membership.Members[2].IsLearner = true
		}),
		want:        hkSummary{Reason: ReasonDefragmenting, Resolved: true},
		wantMessage: "housekeeping waits: learner demo-m2 is not yet a voting member",
	}, {
		name:   "a member out and nothing to do",
		reason: "waiting is only said when there is work",
		in: with(hkCluster(policyOn, nil, three(tidy, tidy, tidy)...), func(o *Observed) {
			o.Membership.Members[2] = down(o.Membership.Members[2])
		}),
		want: hkSummary{},
	}, {
		name:   "the recorded member still defragmenting",
		reason: "status.housekeeping names demo-m0 and it does not answer: its defragmentation runs, nobody else starts",
		in: with(hkCluster(policyOn, &v1beta2.HousekeepingStatus{Defragmenting: name(0)}, three(fragmented, fragmented, fragmented)...), func(o *Observed) {
			o.Membership.Members[0] = down(o.Membership.Members[0])
		}),
		want:        hkSummary{Reason: ReasonDefragmenting, Resolved: true},
		wantMessage: "defragmenting member demo-m0: waiting for it to finish and answer again",
	}, {
		name:   "the recorded member answers, not defragmented",
		reason: "demo-m0 answers with its space still unused (its defragmentation never ran, or failed): it is started again, before demo-m2",
		in:     hkCluster(policyOn, &v1beta2.HousekeepingStatus{Defragmenting: name(2)}, three(fragmented, tidy, fragmented)...),
		want:   hkSummary{Action: "defragment demo-m2", Reason: ReasonDefragmenting, Resolved: true},
	}, {
		name:   "the recorded member done",
		reason: "demo-m0 answers defragmented: the next member goes",
		in:     hkCluster(policyOn, &v1beta2.HousekeepingStatus{Defragmenting: name(0)}, three(tidy, fragmented, fragmented)...),
		want:   hkSummary{Action: "defragment demo-m2", Reason: ReasonDefragmenting, Resolved: true},
	}, {
		name:   "a CORRUPT alarm",
		reason: "CORRUPT is left to a person: no housekeeping at all meanwhile",
		in: hkCluster(policyOn, nil, withAlarm(sized(member(1, name(0)), 400, 100), corruptOf(1)),
			withAlarm(sized(member(2, name(1)), 400, 100), corruptOf(1)), withAlarm(sized(member(3, name(2)), 400, 100), corruptOf(1))),
		want: hkSummary{},
	}, {
		name:   "NOSPACE, recovery off",
		reason: "without recovery the alarm is only reported; defragmentation by thresholds goes on",
		in:     hkCluster(noRecovery, nil, nospaceAll(three(fragmented, tidy, tidy))...),
		want:   hkSummary{Action: "defragment demo-m0", Reason: ReasonDefragmenting, Resolved: true},
	}, {
		name:        "NOSPACE: compaction first",
		reason:      "nothing recorded: the history is compacted to the newest revision a member reports",
		in:          hkCluster(policyOn, nil, nospaceAll(withRevisions(three([2]int64{1001, 1001}, [2]int64{1001, 1001}, [2]int64{1001, 1001}), 700, 702, 701))...),
		want:        hkSummary{Action: "compact 702", Reason: ReasonRecoveringNoSpace, Resolved: true},
		wantMessage: "recovering from NOSPACE: compacting the history to revision 702",
	}, {
		name:   "NOSPACE: keys deleted since the compaction",
		reason: "deleting keys raises the revision: the history is compacted again, and the defragmentations start over",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 400, Defragmented: []string{name(0)}},
			nospaceAll(three([2]int64{1001, 1001}, [2]int64{1001, 1001}, [2]int64{1001, 1001}))...),
		want: hkSummary{Action: "compact 500", Reason: ReasonRecoveringNoSpace, Resolved: true},
	}, {
		name:   "NOSPACE: compacted, a follower first",
		reason: "after the compaction each member over 80% of the quota is defragmented, its size in use notwithstanding (it lags after a compaction)",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500},
			nospaceAll(three([2]int64{1001, 1001}, [2]int64{1001, 1001}, [2]int64{1001, 1001}))...),
		want:        hkSummary{Action: "defragment demo-m0", Reason: ReasonRecoveringNoSpace, Resolved: true},
		wantMessage: "recovering from NOSPACE: defragmenting member demo-m0, whose database file is over 80% of the quota",
	}, {
		name:   "NOSPACE: a member already under the level",
		reason: "demo-m0's file is under 800 MiB: only demo-m2 and the leader need defragmenting",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500},
			nospaceAll(three([2]int64{700, 100}, [2]int64{1001, 1001}, [2]int64{1001, 1001}))...),
		want: hkSummary{Action: "defragment demo-m2", Reason: ReasonRecoveringNoSpace, Resolved: true},
	}, {
		name:   "NOSPACE: the leader last",
		reason: "both followers are done",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0), name(2)}},
			nospaceAll(three([2]int64{5, 5}, [2]int64{1001, 1001}, [2]int64{5, 5}))...),
		want: hkSummary{Action: "defragment demo-m1", Reason: ReasonRecoveringNoSpace, Resolved: true},
	}, {
		name:   "NOSPACE: every file under the level",
		reason: "every member is under 80% of the quota: the alarm is disarmed",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0), name(1), name(2)}},
			nospaceAll(three([2]int64{5, 5}, [2]int64{5, 5}, [2]int64{5, 5}))...),
		want:        hkSummary{Action: "disarm-nospace demo-m1", Reason: ReasonRecoveringNoSpace, Resolved: true},
		wantMessage: "disarming the alarm, every member's database file under 80% of the quota",
	}, {
		name:   "NOSPACE: the data does not fit",
		reason: "every member was defragmented since the compaction and is still over the level, none with space unused nor larger than another: the data takes that much, and a person deletes keys or raises the quota",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0), name(1), name(2)}},
			nospaceAll(three([2]int64{900, 900}, [2]int64{900, 900}, [2]int64{900, 900}))...),
		want:        hkSummary{Reason: ReasonNoSpace, Blocked: ReasonNoSpace, Resolved: true},
		wantMessage: "compacted to revision 500 and defragmented, the database of member demo-m0, demo-m1, demo-m2 is still over 80% of the quota of 1000 MiB: delete keys, or raise spec.etcd.quotaBackendBytes",
	}, {
		name: "NOSPACE: a defragmentation that came before its compaction had freed the pages",
		reason: "every member was defragmented since the compaction, yet demo-m0's file is still as full as before while the leader's and demo-m2's, " +
			"which hold the same data, are under the level: etcd compacts in the background, in batches, and demo-m0's defragmentation slipped in before " +
			"the batch that drops the deleted keys (the e2e flake: the hook then waited for keys to be deleted, which they were); demo-m0 is taken again",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0), name(1), name(2)}},
			nospaceAll(three([2]int64{1010, 1010}, [2]int64{200, 200}, [2]int64{200, 200}))...),
		want:        hkSummary{Action: "defragment demo-m0", Reason: ReasonRecoveringNoSpace, Resolved: true},
		wantMessage: "recovering from NOSPACE: defragmenting member demo-m0 again",
	}, {
		name:   "NOSPACE: the first pass before a second defragmentation",
		reason: "demo-m0's file shows its defragmentation came too early, but the leader has not had its own yet: the leader goes first, as it would have",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0), name(2)}},
			nospaceAll(three([2]int64{1010, 1010}, [2]int64{1010, 1010}, [2]int64{200, 200}))...),
		want: hkSummary{Action: "defragment demo-m1", Reason: ReasonRecoveringNoSpace, Resolved: true},
	}, {
		name:   "NOSPACE: pages freed after the defragmentation show",
		reason: "no member is under the level, but demo-m2's file shows 400 MiB unused since its defragmentation: the compaction went on after it, and demo-m2 is taken again",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0), name(1), name(2)}},
			nospaceAll(three([2]int64{1010, 1010}, [2]int64{1010, 1010}, [2]int64{1010, 610}))...),
		want: hkSummary{Action: "defragment demo-m2", Reason: ReasonRecoveringNoSpace, Resolved: true},
	}, {
		name:   "NOSPACE: files of the same data a few pages apart",
		reason: "the files differ by less than 1 MiB, what two rewrites of the same data may: no member holds space a defragmentation gives back, and the data does not fit",
		in: with(hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmented: []string{name(0), name(1), name(2)}},
			nospaceAll(three([2]int64{900, 900}, [2]int64{900, 900}, [2]int64{900, 900}))...), func(o *Observed) {
			o.Membership.Members[0].DBSize += 768 << 10
			o.Membership.Members[0].DBSizeInUse += 768 << 10
		}),
		want:        hkSummary{Reason: ReasonNoSpace, Blocked: ReasonNoSpace, Resolved: true},
		wantMessage: "the database of member demo-m0, demo-m1, demo-m2 is still over 80% of the quota",
	}, {
		name:   "NOSPACE: a member not ready",
		reason: "the recovery waits like any other step",
		in: with(hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500},
			nospaceAll(three([2]int64{1001, 1001}, [2]int64{1001, 1001}, [2]int64{1001, 1001}))...), func(o *Observed) {
			o.Pods[name(0)] = memberPod(name(0), "Running", false)
		}),
		want:        hkSummary{Reason: ReasonRecoveringNoSpace, Resolved: true},
		wantMessage: "housekeeping waits: member demo-m0 is not ready",
	}, {
		name:   "NOSPACE: the recorded member answers defragmented",
		reason: "demo-m0's defragmentation ended (it answers with no space left unused): it counts as done, the next member goes",
		in: hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500, Defragmenting: name(0)},
			nospaceAll(three([2]int64{900, 900}, [2]int64{1001, 1001}, [2]int64{1001, 1001}))...),
		want: hkSummary{Action: "defragment demo-m2", Reason: ReasonRecoveringNoSpace, Resolved: true},
	}, {
		name:   "NOSPACE, quota from the environment",
		reason: "ETCD_QUOTA_BACKEND_BYTES in spec.pod.etcdEnv is the quota the members run with (the flag is left out): 2 GiB, so 1001 MiB files are fine",
		in: with(hkCluster(policyOn, &v1beta2.HousekeepingStatus{CompactedRevision: 500},
			nospaceAll(three([2]int64{1001, 1001}, [2]int64{1001, 1001}, [2]int64{1001, 1001}))...), func(o *Observed) {
			o.Cluster.Spec.Pod = &v1beta2.PodPolicy{EtcdEnv: envQuota(2 << 30)}
		}),
		want: hkSummary{Action: "disarm-nospace demo-m1", Reason: ReasonRecoveringNoSpace, Resolved: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPlanner(tt.in)
			views := p.viewMembers()
			step, ok := p.housekeeping(views, p.leaderView(views))
			if diff := cmp.Diff(tt.want, summarizeStep(step, ok)); diff != "" {
				t.Errorf("%s\nstep (-want +got):\n%s", tt.reason, diff)
			}
			if msg := step.progressing.message; !strings.Contains(msg, tt.wantMessage) {
				t.Errorf("%s\nmessage %q, want it to contain %q", tt.reason, msg, tt.wantMessage)
			}
			if a := step.action; a != nil && a.Type == membership.ActionDefragment && a.Endpoint != testAddresses.ClientURL(a.Name) {
				t.Errorf("defragment %s is sent to %q, want the member's own endpoint", a.Name, a.Endpoint)
			}
		})
	}
}

// nospaceAll has every member report a NOSPACE alarm raised by demo-m0.
func nospaceAll(ms []membership.Member) []membership.Member {
	for i := range ms {
		ms[i] = withAlarm(ms[i], nospaceOf(1))
	}
	return ms
}

func withRevisions(ms []membership.Member, revisions ...int64) []membership.Member {
	for i := range ms {
		ms[i].Revision = revisions[i]
	}
	return ms
}

func envQuota(n int64) []corev1.EnvVar {
	return []corev1.EnvVar{{Name: "ETCD_QUOTA_BACKEND_BYTES", Value: fmt.Sprint(n)}}
}

func TestAlarmProblems(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   []problem
	}{{
		name:   "no alarm",
		reason: "",
		in:     hkCluster(nil, nil, three([2]int64{10, 5}, [2]int64{10, 5}, [2]int64{10, 5})...),
	}, {
		name:   "NOSPACE without a policy",
		reason: "the alarm shows at once, with the quota and what a person does",
		in: hkCluster(nil, nil, withAlarm(sized(member(1, name(0)), 1001, 1001), nospaceOf(2), "etcdserver: no leader"),
			sized(member(2, name(1)), 1001, 1001), withAlarm(sized(member(3, name(2)), 1001, 1001), nospaceOf(2))),
		want: []problem{{ReasonNoSpace, `etcd raised its NOSPACE alarm (member demo-m1): a member's database reached the quota of 1000 MiB (spec.etcd.quotaBackendBytes), and etcd refuses writes until space is freed and the alarm disarmed; delete keys, then compact, defragment each member and disarm the alarm (the runbook "NOSPACE alarm" in docs/etcdcluster.md), or set spec.housekeeping for the hook to do it`}},
	}, {
		name:   "NOSPACE of two members, with the policy",
		reason: "each member that applied the write over quota may raise its own alarm; the default quota is 2 GiB",
		in: with(hkCluster(policyOn, nil, nospaceAll([]membership.Member{withAlarm(sized(member(1, name(0)), 1001, 1001), nospaceOf(3)),
			withAlarm(sized(member(2, name(1)), 1001, 1001), nospaceOf(3)), withAlarm(sized(member(3, name(2)), 1001, 1001), nospaceOf(3))})...),
			func(o *Observed) { o.Cluster.Spec.Etcd = nil }),
		want: []problem{{ReasonNoSpace, `etcd raised its NOSPACE alarm (member demo-m0, demo-m2): a member's database reached the quota of 2 GiB (spec.etcd.quotaBackendBytes), and etcd refuses writes until space is freed and the alarm disarmed; spec.housekeeping recovers from it: it compacts the history, defragments the members one at a time and disarms the alarm`}},
	}, {
		name:   "CORRUPT and NOSPACE",
		reason: "both are reported, CORRUPT first; a member no longer in the cluster is named by its ID",
		in: hkCluster(nil, nil, withAlarm(sized(member(1, name(0)), 10, 5), corruptOf(1), nospaceOf(0xabc)),
			sized(member(2, name(1)), 10, 5), sized(member(3, name(2)), 10, 5)),
		want: []problem{
			{ReasonCorrupt, `etcd raised its CORRUPT alarm (member demo-m0): the members' data differ, and etcd refuses writes; the hook leaves this to a person and does no housekeeping meanwhile: see the runbook "CORRUPT alarm" in docs/etcdcluster.md`},
			{ReasonNoSpace, `etcd raised its NOSPACE alarm (member abc): a member's database reached the quota of 1000 MiB (spec.etcd.quotaBackendBytes), and etcd refuses writes until space is freed and the alarm disarmed; delete keys, then compact, defragment each member and disarm the alarm (the runbook "NOSPACE alarm" in docs/etcdcluster.md), or set spec.housekeeping for the hook to do it`},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newPlanner(tt.in).alarmProblems()
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(problem{})); diff != "" {
				t.Errorf("%s\nalarmProblems() (-want +got):\n%s", tt.reason, diff)
			}
			// Sizes change from sync to sync; the problems must not.
			for i := range tt.in.Membership.Members {
				tt.in.Membership.Members[i].DBSize += 12345
				tt.in.Membership.Members[i].DBSizeInUse += 678
			}
			if diff := cmp.Diff(got, newPlanner(tt.in).alarmProblems(), cmp.AllowUnexported(problem{})); diff != "" {
				t.Errorf("the problems changed with the members' sizes (-before +after):\n%s", diff)
			}
		})
	}
}
