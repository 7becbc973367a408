package etcdcluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// Housekeeping looks after etcd's database.
//
// etcd's alarms are reported on every sync that reads the members, with or
// without a policy: each member's Status lists every alarm of the cluster.
// NOSPACE (a database reached its quota; etcd refuses writes) and CORRUPT
// (members' data differ) turn Degraded with reasons NoSpace and Corrupt,
// naming the members and the quota. A CORRUPT alarm is left to a person
// (the runbook in docs/etcdcluster.md), and while it stands the hook does no
// housekeeping at all.
//
// spec.housekeeping (opt-in) adds two tasks, as the last rung of the
// ladder in nextStep: after any scaling, upgrade or rollout, and only
// when every member is a ready voter that answers and has caught up with
// the leader.
//   - NOSPACE recovery: compact the history to the current revision (etcd
//     keeps serving meanwhile), defragment each member whose file is over
//     80% of the quota, one at a time, followers first and the leader
//     last, and disarm the alarm once every member's file is under that.
//     Each member is defragmented once per compaction: etcd counts the
//     pages a compaction freed as in use until its next write, which
//     NOSPACE refuses, so only the rewritten file tells what the data
//     takes. Unless the rewrite came too early: the compaction RPC
//     returns once etcd has scheduled it, and each member then deletes
//     the old revisions in the background, in batches of 1000 with a
//     pause between them; a defragmentation that slips into a pause
//     copies what the later batches were to drop, and the file stays as
//     full as it was (measured on 3.6.16, a 32 MiB quota filled over 1100
//     older revisions and 80% deleted: 33 MiB, all of it in use, where a
//     defragmentation 300 ms later left 6.5 MiB). So once every member
//     had its turn, a member still over the level is taken again when its
//     file shows space its data does not take: 1 MiB unused, or 1 MiB
//     more than another member's file, which holds the same data. Only a
//     file still over the level with neither holds more than fits, and
//     the status asks for keys to be deleted (which compacts again) or
//     for a larger quota.
//   - Defragmentation: a member whose unused space (dbSize - dbSizeInUse)
//     passes both thresholds of the policy is defragmented, one member at
//     a time, followers first and the leader last.
//
// A defragmentation can outlast Metacontroller's hook timeout: etcd
// rewrites the member's whole database and serves nothing from it
// meanwhile. The hook sends the request with a short deadline; etcd goes
// on when the caller gives up (the handler never looks at its context,
// in 3.4, 3.5 and 3.6 alike), so a deadline means "started". Its end is
// seen on later syncs: while it runs the member does not answer Status
// (measured on 3.4.23, 3.5.35 and 3.6.16), so no other member can be
// chosen; once it answers, its unused space is gone. Beside that, what
// the hook started is written to status.housekeeping, which the next sync
// reads back: until the member it names is seen answering with its space
// given back, no other member is defragmented, even on a release that
// would answer Status while it defragments.

// Reasons of housekeeping. NoSpace and Corrupt are Degraded's; the others
// Progressing's.
const (
	ReasonNoSpace           = "NoSpace"
	ReasonCorrupt           = "Corrupt"
	ReasonRecoveringNoSpace = "RecoveringNoSpace"
	ReasonDefragmenting     = "Defragmenting"
)

// alarmProblems are the Degraded problems of etcd's alarms. Their
// messages name members and the quota, never sizes, so that a cluster
// that stays in alarm keeps a status that does not change.
func (p *planner) alarmProblems() []problem {
	alarms := p.o.Membership.Alarms()
	var out []problem
	if membership.Fenced(alarms) {
		// The hook's own (hibernatebackup.go): while hibernating it is the
		// step under way, which the hibernation reports; otherwise it is
		// lifted as the first step.
		alarms = membership.WithoutFence(alarms)
		if !p.spec.Hibernated {
			out = append(out, problem{ReasonWritesFenced, fmt.Sprintf("the hook's write fence stands (etcd's CORRUPT alarm as member %x, raised for a final backup before hibernating): etcd refuses every write until the hook lifts it, its first step once a quorum answers", membership.FenceMemberID)})
		}
	}
	if len(alarms) == 0 {
		return out
	}
	raisedBy := map[string][]string{}
	var types []string
	for _, a := range alarms {
		if _, ok := raisedBy[a.Type]; !ok {
			types = append(types, a.Type)
		}
		raisedBy[a.Type] = append(raisedBy[a.Type], p.alarmMemberName(a.MemberID))
	}
	for _, t := range types {
		members := strings.Join(raisedBy[t], ", ")
		switch t {
		case membership.AlarmCorrupt:
			out = append(out, problem{ReasonCorrupt, fmt.Sprintf(
				"etcd raised its CORRUPT alarm (member %s): the members' data differ, and etcd refuses writes; the hook leaves this to a person and does no housekeeping meanwhile: see the runbook \"CORRUPT alarm\" in docs/etcdcluster.md", members)})
		case membership.AlarmNoSpace:
			msg := fmt.Sprintf("etcd raised its NOSPACE alarm (member %s): a member's database reached the quota of %s (spec.etcd.quotaBackendBytes), and etcd refuses writes until space is freed and the alarm disarmed", members, formatBytes(p.quotaBytes()))
			if p.spec.Housekeeping.RecoversNoSpace() {
				msg += "; spec.housekeeping recovers from it: it compacts the history, defragments the members one at a time and disarms the alarm"
			} else {
				msg += "; delete keys, then compact, defragment each member and disarm the alarm (the runbook \"NOSPACE alarm\" in docs/etcdcluster.md), or set spec.housekeeping for the hook to do it"
			}
			out = append(out, problem{ReasonNoSpace, msg})
		default:
			out = append(out, problem{"Alarm" + t, fmt.Sprintf("etcd raised an alarm %s (member %s)", t, members)})
		}
	}
	return out
}

// alarmMemberName names the member an alarm is about, or gives its ID in
// hex when it is no longer a member (an alarm outlives its member).
func (p *planner) alarmMemberName(id uint64) string {
	for _, m := range p.o.Membership.Members {
		if m.ID == id {
			if name := membership.MemberName(m, p.o.Cluster.Name); name != "" {
				return name
			}
		}
	}
	return fmt.Sprintf("%x", id)
}

// quotaBytes is the quota the members run with: spec.etcd's, unless
// spec.pod.etcdEnv sets it (the flag is then left out; see
// etcdSettingsFlags).
func (p *planner) quotaBytes() int64 {
	if p.spec.Pod != nil {
		for _, env := range p.spec.Pod.EtcdEnv {
			if env.Name == "ETCD_QUOTA_BACKEND_BYTES" {
				if n, err := strconv.ParseInt(env.Value, 10, 64); err == nil && n > 0 {
					return n
				}
			}
		}
	}
	return p.spec.Etcd.WithDefaults().QuotaBackendBytes
}

// disarmLevel is how large every member's database file may be when the
// NOSPACE alarm is disarmed.
func (p *planner) disarmLevel() int64 {
	return p.quotaBytes() / 100 * v1beta2.NoSpaceDisarmPercent
}

// recoveringNoSpace: a NOSPACE alarm stands, no CORRUPT alarm does, and
// the policy recovers.
func (p *planner) recoveringNoSpace() bool {
	alarms := p.o.Membership.Alarms()
	return p.spec.Housekeeping.RecoversNoSpace() && membership.HasAlarm(alarms, membership.AlarmNoSpace) && !membership.HasAlarm(alarms, membership.AlarmCorrupt)
}

// resyncNearQuota is how soon a cluster with a member's database over
// the disarm level is looked at again when nothing else is due. An alarm
// changes no Kubernetes object: without this, NOSPACE would show at
// Metacontroller's next periodic resync, up to a minute later.
const resyncNearQuota = 10 * time.Second

// housekeeping is the last rung of nextStep: the step of spec.housekeeping
// due now, if any. It reports false when there is nothing to do and
// nothing to watch.
func (p *planner) housekeeping(views []memberView, leader memberView) (stepResult, bool) {
	step, ok := p.housekeepingStep(views, leader)
	if !ok && slices.ContainsFunc(views, func(v memberView) bool { return v.DBSize >= p.disarmLevel() }) {
		return stepResult{resync: resyncNearQuota}, true
	}
	return step, ok
}

func (p *planner) housekeepingStep(views []memberView, leader memberView) (stepResult, bool) {
	pol := p.spec.Housekeeping.WithDefaults()
	if pol == nil || membership.HasAlarm(p.o.Membership.Alarms(), membership.AlarmCorrupt) {
		return stepResult{}, false
	}
	recovering := p.recoveringNoSpace()
	reason := ReasonDefragmenting
	if recovering {
		reason = ReasonRecoveringNoSpace
	}
	rec := p.observedRecord()
	inFlight := memberViewNamed(views, rec.Defragmenting)

	// Never while a member is out: every member must be a ready voter that
	// answers and has applied what the leader has. A member being
	// defragmented does not answer, so this also keeps a second one from
	// starting.
	if why := housekeepingGate(views, leader); why != "" {
		switch {
		case inFlight != nil && !inFlight.Reachable:
			return waiting(reason, fmt.Sprintf("defragmenting member %s: waiting for it to finish and answer again", inFlight.name)), true
		case recovering || inFlight != nil || slices.ContainsFunc(views, func(v memberView) bool { return p.fragmented(v.Member) }):
			return waiting(reason, "housekeeping waits: "+why), true
		}
		return stepResult{}, false
	}

	if recovering {
		return p.recoverNoSpace(views, leader, inFlight, rec), true
	}
	order := p.defragOrder(views, leader, inFlight, false, rec)
	if len(order) == 0 {
		return stepResult{}, false
	}
	v := order[0]
	unused := (v.DBSize - v.DBSizeInUse) * 100 / max(v.DBSize, 1)
	return acting(p.defragment(v, fmt.Sprintf("defragmenting member %s: %d%% of its database file is unused, over spec.housekeeping's thresholds", v.name, unused)), reason), true
}

// recoverNoSpace takes the next step out of a NOSPACE alarm, every member
// ready and caught up: compact, defragment each member over the disarm
// level once, disarm.
func (p *planner) recoverNoSpace(views []memberView, leader memberView, inFlight *memberView, rec v1beta2.HousekeepingStatus) stepResult {
	var revision int64
	for _, v := range views {
		revision = max(revision, v.Revision)
	}
	if rec.CompactedRevision < revision {
		return acting(membership.Action{
			Type: membership.ActionCompact, Name: leader.name, MemberID: leader.ID, Revision: revision,
			Reason: fmt.Sprintf("recovering from NOSPACE: compacting the history to revision %d", revision),
		}, ReasonRecoveringNoSpace)
	}
	if order := p.defragOrder(views, leader, inFlight, true, rec); len(order) > 0 {
		v := order[0]
		if slices.Contains(rec.Defragmented, v.name) {
			return acting(p.defragment(v, fmt.Sprintf("recovering from NOSPACE: defragmenting member %s again, whose database file is still over %d%% of the quota: %s, so its defragmentation came before the compaction had dropped the old revisions on it",
				v.name, v1beta2.NoSpaceDisarmPercent, p.defragmentedEarly(v.Member))), ReasonRecoveringNoSpace)
		}
		return acting(p.defragment(v, fmt.Sprintf("recovering from NOSPACE: defragmenting member %s, whose database file is over %d%% of the quota", v.name, v1beta2.NoSpaceDisarmPercent)), ReasonRecoveringNoSpace)
	}
	var tooFull []string
	for _, v := range views {
		if v.DBSize >= p.disarmLevel() {
			tooFull = append(tooFull, v.name)
		}
	}
	if len(tooFull) > 0 {
		return blockedStep(ReasonNoSpace, fmt.Sprintf(
			"recovering from NOSPACE: compacted to revision %d and defragmented, the database of member %s is still over %d%% of the quota of %s: delete keys, or raise spec.etcd.quotaBackendBytes",
			rec.CompactedRevision, strings.Join(tooFull, ", "), v1beta2.NoSpaceDisarmPercent, formatBytes(p.quotaBytes())))
	}
	return acting(membership.Action{
		Type: membership.ActionDisarmAlarm, Name: leader.name, MemberID: leader.ID,
		Reason: fmt.Sprintf("recovering from NOSPACE: disarming the alarm, every member's database file under %d%% of the quota", v1beta2.NoSpaceDisarmPercent),
	}, ReasonRecoveringNoSpace)
}

// observedRecord is the previous status.housekeeping brought up to date
// with what this sync observes: a defragmentation is seen done once its
// member answers with its space given back (or is no longer a member),
// and the NOSPACE recovery's part is gone with the alarm.
func (p *planner) observedRecord() v1beta2.HousekeepingStatus {
	var rec v1beta2.HousekeepingStatus
	if prev := p.o.Cluster.Status.Housekeeping; prev != nil {
		rec = *prev
		rec.Defragmented = slices.Clone(prev.Defragmented)
	}
	ms := p.o.Membership
	if ms == nil || ms.Stale {
		// Nothing seen to end anything: carry it over.
		return rec
	}
	recovering := p.recoveringNoSpace()
	if rec.Defragmenting != "" {
		i := slices.IndexFunc(ms.Members, func(m membership.Member) bool { return membership.MemberName(m, p.o.Cluster.Name) == rec.Defragmenting })
		switch {
		case i < 0:
			rec.Defragmenting = ""
		case p.looksDefragmented(ms.Members[i], recovering):
			if recovering && rec.CompactedRevision != 0 && !slices.Contains(rec.Defragmented, rec.Defragmenting) {
				rec.Defragmented = append(rec.Defragmented, rec.Defragmenting)
				slices.Sort(rec.Defragmented)
			}
			rec.Defragmenting = ""
		}
	}
	rec.Defragmented = slices.DeleteFunc(rec.Defragmented, func(name string) bool {
		return !slices.ContainsFunc(ms.Members, func(m membership.Member) bool { return membership.MemberName(m, p.o.Cluster.Name) == name })
	})
	if !membership.HasAlarm(ms.Alarms(), membership.AlarmNoSpace) {
		rec.CompactedRevision, rec.Defragmented = 0, nil
	}
	return rec
}

// housekeepingRecord is status.housekeeping of this sync: the observed
// record, with what the step this sync took started. Like the rest of the
// status it is derived from the request alone, the previous status
// included.
func (p *planner) housekeepingRecord() *v1beta2.HousekeepingStatus {
	rec := p.observedRecord()
	if out := p.o.Acted; out != nil && out.Err == nil {
		switch out.Action.Type {
		case membership.ActionCompact:
			rec.CompactedRevision, rec.Defragmented = out.Action.Revision, nil
		case membership.ActionDefragment:
			rec.Defragmenting = out.Action.Name
		case membership.ActionDisarmAlarm:
			rec = v1beta2.HousekeepingStatus{}
		}
	}
	if rec.CompactedRevision == 0 && rec.Defragmenting == "" && len(rec.Defragmented) == 0 {
		return nil
	}
	if len(rec.Defragmented) == 0 {
		rec.Defragmented = nil
	}
	return &rec
}

// formatBytes writes a size in the largest binary unit that divides it.
func formatBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
