package etcdcluster

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// withMembership plans a sync with etcd's membership in hand: the children
// follow the membership, and at most one step moves the membership toward
// the spec.
func (p *planner) withMembership() Decision {
	o := p.o
	if ok, why := versionChangeAllowed(p.lowestVersion(), p.spec.Version); !ok {
		return p.frozen(ReasonVersionSkew, "the version change is refused and the cluster is left as it is: "+why)
	}
	views := p.viewMembers()
	p.serving = p.servingMembers(views)
	p.volumes = p.planVolumes(views)
	children := append(p.commonChildren(), p.memberChildren(views)...)

	r := p.observe()
	for _, v := range views {
		if v.dead {
			r.problem(ReasonDeadMember, fmt.Sprintf("member %s is dead: %s", v.name, v.deadReason))
		}
	}
	leader := p.leaderView(views)
	upgrade := p.upgradeState(views, leader)
	rollout := p.rolloutState(views, leader)
	step := p.nextStep(views, upgrade, rollout)
	if o.Acted == nil && !o.Membership.Stale {
		children = p.applyPodStep(children, step)
	}
	plan.SortChildren(children)
	r.upgrading = p.upgradingCondition(views, upgrade, step)
	d := Decision{Children: children}
	if a := step.action; a != nil {
		// Every change goes to the leader: etcd forwards from followers,
		// but a learner refuses membership RPCs outright.
		a.LeaderID, a.LeaderEndpoint = leader.ID, p.clientEndpoint(leader)
	}
	switch {
	case o.Acted != nil:
		step = p.reportOutcome(*o.Acted)
	case step.action != nil && o.Membership.Stale:
		step = stepResult{}
	}
	if step.progressing.reason != "" {
		r.progressing = step.progressing
	} else if p.volumes.waiting != "" {
		// The claims grow beside the membership steps: a step under way
		// is the one to report, and the growth goes on meanwhile.
		r.progressing = conditionTrue(ReasonVolumesGrowing, p.volumes.waiting)
		step.resync = resyncWaiting
	}
	p.volumeProblems(&r)
	if step.blocked != nil {
		r.problems = append([]problem{*step.blocked}, r.problems...)
	}
	if r.phase == v1beta2.PhaseFailed {
		d.ResyncAfter = resyncTrouble
	} else {
		d.ResyncAfter = step.resync
	}
	d.Action = step.action
	d.Status = p.status(r)
	if a := d.Action; a != nil && a.Type.Auth() && d.Status.Auth != nil {
		pending := *d.Status.Auth
		pending.Pending = a.String()
		d.Status.Auth = &pending
	}
	return d
}

// stepResult is the planner's choice of the next membership step.
type stepResult struct {
	action      *membership.Action
	progressing condition
	// blocked is a problem that keeps the cluster from converging.
	blocked *problem
	// reimage is the member Pod whose image changes to the target in this
	// answer: an upgrade step, or the repair of a member the previous
	// version change broke.
	reimage *corev1.Pod
	// drop is the member Pod this answer leaves out, so that Metacontroller
	// deletes it and a later sync renders it again on its claim: a rollout
	// step, or the repair of a member the previous spec broke.
	drop   *corev1.Pod
	resync time.Duration
}

// applyPodStep makes the step's change to a member Pod in the answer.
func (p *planner) applyPodStep(children []plan.Child, step stepResult) []plan.Child {
	out := children[:0]
	for _, c := range children {
		switch {
		case c.Kind != plan.KindPod:
		case step.reimage != nil && c.Name == step.reimage.Name:
			c = p.reimagedPod(step.reimage)
		case step.drop != nil && c.Name == step.drop.Name:
			continue
		}
		out = append(out, c)
	}
	return out
}

func waiting(reason, message string) stepResult {
	return stepResult{progressing: conditionTrue(reason, message), resync: resyncWaiting}
}

func acting(a membership.Action, reason string) stepResult {
	a.Step = reason
	return stepResult{action: &a, progressing: conditionTrue(reason, a.Reason), resync: resyncAfterAction}
}

func blockedStep(reason, message string) stepResult {
	return stepResult{
		progressing: conditionFalse(reason, message),
		blocked:     &problem{reason, message},
		resync:      resyncTrouble,
	}
}

// nextStep is the ladder of membership steps, most urgent first. Each rung
// returns; the first that applies is the only step of this sync.
func (p *planner) nextStep(views []memberView, upgrade upgradeState, rollout rolloutState) stepResult {
	ms := p.o.Membership
	if ms.Stale || !membership.HasQuorum(ms) || ms.LeaderID == 0 {
		return blockedStep(ReasonQuorumLost, "no membership change is made without a quorum and a leader")
	}
	leader := p.leaderView(views)
	// Before anything else: etcd refuses every write behind the fence.
	if step, ok := p.liftFence(leader); ok {
		return step
	}

	// A learner is the member the previous step added. It is promoted once
	// caught up, or removed if it can never start.
	for _, v := range views {
		if !v.IsLearner {
			continue
		}
		if v.dead {
			return acting(p.remove(v, "learner "+v.name+" is removed: "+v.deadReason), ReasonReplacingMember)
		}
		if !v.ready && p.outdated(v.pod) {
			// Made for an earlier spec and not serving: a learner on the
			// current spec takes its place, without waiting for it to fail.
			return acting(p.remove(v, "learner "+v.name+", made for an earlier spec and not ready, is removed"), ReasonRollingChange)
		}
		if why := podFailureOf(v.pod); why != "" && len(rollout.pending) > 0 {
			return blockedStep(ReasonRolloutHalted, fmt.Sprintf("rollout halted: learner %s on the new spec cannot run: %s", v.name, why))
		}
		if !v.Started() || !v.ready || !membership.LearnerCaughtUp(v.Member, leader.Member) {
			step := waiting(ReasonWaitingForMember, fmt.Sprintf("waiting for learner %s to start and catch up with the leader", v.name))
			if v.ready {
				// Its Pod is ready already: no Pod event will say when it
				// starts serving or catches up, so look again soon.
				step.resync = resyncAfterAction
			}
			return step
		}
		if !membership.CanPromote(ms, v.ID) {
			return blockedStep(ReasonPromotingLearner, fmt.Sprintf("learner %s cannot be promoted without risking quorum", v.name))
		}
		a := membership.Action{Type: membership.ActionPromoteMember, Name: v.name, MemberID: v.ID, Reason: fmt.Sprintf("promoting learner %s, which has caught up with the leader", v.name)}
		return acting(a, ReasonPromotingLearner)
	}

	// A voter that never started was added without a learner (etcd < 3.4);
	// nothing else may change until it runs, or it is given up.
	for _, v := range views {
		if v.Started() {
			continue
		}
		if v.dead && membership.CanRemove(ms, v.ID) {
			return acting(p.remove(v, "member "+v.name+" is removed: "+v.deadReason), ReasonReplacingMember)
		}
		return waiting(ReasonWaitingForMember, fmt.Sprintf("waiting for new member %s to start", v.name))
	}

	for _, v := range views {
		if !v.dead {
			continue
		}
		if !membership.CanRemove(ms, v.ID) {
			return blockedStep(ReasonDeadMember, fmt.Sprintf("dead member %s cannot be removed: the other voting members would have no quorum", v.name))
		}
		return acting(p.remove(v, fmt.Sprintf("dead member %s is removed before it is replaced: %s", v.name, v.deadReason)), ReasonReplacingMember)
	}

	// etcd's downgrade protocol: cancel one set back, enable the one asked
	// for, and hold every binary until etcd has lowered the storage.
	if step, ok := p.downgradeStep(views, upgrade.downgrade); ok {
		return step
	}

	// A member that is down on another image than the target is changed at
	// once, without waiting for it: it serves nothing as it is, and this is
	// how setting the previous version back rescues a member that an
	// upgrade broke. Across a downgrade, only once etcd allows it.
	for _, v := range upgrade.pending {
		if !v.ready && p.mayGetTarget(v, upgrade.downgrade) {
			return stepResult{
				reimage:     v.pod,
				progressing: conditionTrue(ReasonRollingUpgrade, fmt.Sprintf("changing the image of member %s, which is not ready, to %s", v.name, p.spec.Image())),
				resync:      resyncWaiting,
			}
		}
	}

	if step := p.rescueRollout(views); step.drop != nil {
		return step
	}

	var unready []string
	for _, v := range views {
		if !v.ready {
			unready = append(unready, v.name)
		}
	}
	if len(unready) > 0 {
		switch {
		case upgrade.halted != "":
			return waiting(ReasonUpgradeHalted, "upgrade halted: "+upgrade.halted)
		case upgrade.upgrading != "":
			return waiting(ReasonRollingUpgrade, "upgrading "+upgrade.upgrading)
		case rollout.halted != "":
			return blockedStep(ReasonRolloutHalted, "rollout halted: "+rollout.halted)
		case rollout.rolling != "":
			return waiting(ReasonRollingChange, "rolling out the spec change: waiting for "+rollout.rolling)
		}
		return waiting(ReasonWaitingForMember, "waiting for members to become ready: "+strings.Join(unready, ", "))
	}

	switch size := p.spec.Size; {
	case len(views) < size:
		return p.grow(views)
	case len(views) > size:
		return p.shrink(views, leader)
	case len(upgrade.pending) > 0 || upgrade.halted != "" || upgrade.upgrading != "":
		return p.upgrade(views, leader, upgrade)
	case len(rollout.pending) > 0 || rollout.halted != "" || rollout.rolling != "":
		return p.rollout(views, leader, rollout)
	}
	// Last: etcd's own housekeeping, on a cluster that matches its spec,
	// then its authentication (auth.go).
	if step, ok := p.housekeeping(views, leader); ok {
		return step
	}
	if step, ok := p.authStep(leader); ok {
		return step
	}
	return stepResult{}
}

func (p *planner) leaderView(views []memberView) memberView {
	for _, v := range views {
		if v.ID == p.o.Membership.LeaderID {
			return v
		}
	}
	return memberView{}
}

// clientEndpoint is where the hook reaches a member: the client URL it
// advertises, or the one its Pod is given when it has not said yet.
func (p *planner) clientEndpoint(v memberView) string {
	if len(v.ClientURLs) > 0 {
		return v.ClientURLs[0]
	}
	return p.addresses().ClientURL(v.name)
}

func (p *planner) remove(v memberView, reason string) membership.Action {
	return membership.Action{Type: membership.ActionRemoveMember, Name: v.name, MemberID: v.ID, Reason: reason}
}

// grow adds one member: as a learner wherever etcd supports it, so that a
// member that never starts cannot cost the quorum.
func (p *planner) grow(views []memberView) stepResult {
	o, c := p.o, p.o.Cluster
	name := c.Name + "-" + o.FreshSuffix
	if o.FreshSuffix == "" || p.nameTaken(name, views) {
		return waiting(ReasonScalingUp, "waiting for an unused member name")
	}
	learners := p.learnersSupported()
	if !learners && !membership.CanAddVoter(o.Membership) {
		return blockedStep(ReasonScalingUp, "a voting member cannot be added: the members that answer would not be a quorum of the larger cluster")
	}
	kind := "voting member"
	if learners {
		kind = "learner"
	}
	return acting(membership.Action{
		Type:      membership.ActionAddMember,
		Name:      name,
		PeerURL:   p.addresses().PeerURL(name),
		AsLearner: learners,
		// No name here: until etcd accepts the add, the name is a fresh
		// random draw on every sync, and a status that changes on every
		// sync makes Metacontroller sync again at once.
		Reason: fmt.Sprintf("scaling from %d to %d members: adding a %s", len(views), p.spec.Size, kind),
	}, ReasonScalingUp)
}

// shrink removes one member, never the leader while another member could
// go: removing the leader forces an election and stalls writes.
func (p *planner) shrink(views []memberView, leader memberView) stepResult {
	ms := p.o.Membership
	// An outdated member goes first: in an emptyDir rollout the surplus is
	// the member the new one replaces.
	victim, leaderOutdated := p.outdatedVictim(views, ms.LeaderID)
	if victim == nil && leaderOutdated {
		return p.moveLeaderOff(views, leader, "before "+leader.name+", made for an earlier spec, is removed")
	}
	for i := len(views) - 1; i >= 0 && victim == nil; i-- {
		if views[i].ID != ms.LeaderID {
			victim = &views[i]
		}
	}
	if victim == nil {
		return p.moveLeaderOff(views, leader, "before "+leader.name+" is removed")
	}
	if !membership.CanRemove(ms, victim.ID) {
		return blockedStep(ReasonScalingDown, fmt.Sprintf("member %s cannot be removed without losing quorum", victim.name))
	}
	if p.outdated(victim.pod) && len(views) == p.spec.Size+1 {
		return acting(p.remove(*victim, fmt.Sprintf("rolling out the spec change: removing member %s, which a member on the new spec replaces", victim.name)), ReasonRollingChange)
	}
	return acting(p.remove(*victim, fmt.Sprintf("scaling from %d to %d members: removing %s", len(views), p.spec.Size, victim.name)), ReasonScalingDown)
}

// moveLeaderOff hands leadership to the voter whose etcd has run longest.
// etcd lets a leader remove a voter only once enough voters have been
// connected to it for 5 s, so a member promoted or restarted a moment ago
// would make the step that follows wait; etcd's own handover on shutdown
// prefers the longest-connected peer for the same reason.
func (p *planner) moveLeaderOff(views []memberView, leader memberView, why string) stepResult {
	var to *memberView
	for i, v := range views {
		if v.ID == leader.ID || v.IsLearner || !v.Reachable || !v.ready {
			continue
		}
		if to == nil || runningSince(v.pod).Before(runningSince(to.pod)) {
			to = &views[i]
		}
	}
	if to == nil {
		return blockedStep(ReasonMovingLeader, "no other member is ready to take over leadership "+why)
	}
	return acting(membership.Action{
		Type: membership.ActionMoveLeader, Name: to.name, MemberID: to.ID,
		Reason: fmt.Sprintf("moving leadership from %s to %s %s", leader.name, to.name, why),
	}, ReasonMovingLeader)
}

// runningSince is when the Pod's etcd container last started, or the zero
// time when the kubelet has not said.
func runningSince(pod *corev1.Pod) time.Time {
	if pod == nil {
		return time.Time{}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == "etcd" && cs.State.Running != nil {
			return cs.State.Running.StartedAt.Time
		}
	}
	return time.Time{}
}
