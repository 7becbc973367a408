package etcdcluster

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// Reasons of the Upgrading condition.
const (
	ReasonUpToDate       = "UpToDate"
	ReasonRollingUpgrade = "RollingUpgrade"
	ReasonUpgradeHalted  = "UpgradeHalted"
	ReasonVersionSkew    = "VersionSkewRefused"
)

// versionChangeAllowed applies etcd's rules for changing a running
// cluster's release: one minor version up at a time, patch versions freely
// in either direction, and one minor version down only from 3.6 on,
// through etcd's downgrade protocol (downgrade.go). Any other downgrade
// across a minor version is refused: the data may already use the newer
// minor's format, and no release before 3.6 can lower it. running is the
// lowest version a member runs.
func versionChangeAllowed(running, target string) (bool, string) {
	from, okFrom := parseVersion(running)
	to, okTo := parseVersion(target)
	switch {
	case !okFrom || !okTo:
		return true, ""
	case from.major != to.major:
		return false, fmt.Sprintf("spec.version %s changes the major version of a cluster running %s; etcd supports no such rolling change", target, running)
	case to.minor > from.minor+1:
		return false, fmt.Sprintf("spec.version %s skips a minor version from %s; etcd upgrades one minor version at a time (%d.%d first)", target, running, from.major, from.minor+1)
	case to.minor+1 < from.minor:
		return false, fmt.Sprintf("spec.version %s is a downgrade from %s by more than one minor version; etcd downgrades one minor version at a time (%d.%d first)", target, running, from.major, from.minor-1)
	case to.minor < from.minor && from.less(firstDowngradable):
		return false, fmt.Sprintf("spec.version %s is a downgrade from %s across a minor version, which etcd supports only from 3.6 on (its downgrade protocol); only patch-level downgrades are", target, running)
	}
	return true, ""
}

// containerImage is the etcd container's image in a Pod as observed.
func containerImage(pod *corev1.Pod) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == "etcd" {
			return c.Image
		}
	}
	return ""
}

// podFailure is the kubelet's word that a member's container cannot run
// as it is: an image that cannot be pulled, a crash loop, a container it
// cannot create, a Pod that ended. A container being created or restarted
// is no failure: every member goes through that on its way to a new image.
func podFailure(pod *corev1.Pod) string {
	if podFinished(pod) {
		return "its Pod is " + string(pod.Status.Phase)
	}
	if why := unschedulable(pod); why != "" {
		return why
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != "etcd" {
			continue
		}
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			return strings.TrimSpace(w.Reason + ": " + w.Message)
		}
	}
	return ""
}

// reimagedPod is a kept Pod with the target image: the one change
// Kubernetes allows to a Pod in place. The member keeps its name, identity
// and data; the kubelet restarts its container on the new binary.
func (p *planner) reimagedPod(pod *corev1.Pod) plan.Child {
	kept := p.currentPod(pod)
	out, ok := podObject(kept)
	if !ok {
		return kept
	}
	for i := range out.Spec.Containers {
		if out.Spec.Containers[i].Name == "etcd" {
			out.Spec.Containers[i].Image = p.spec.Image()
		}
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationVersion] = p.spec.Version
	return plan.Child{Kind: plan.KindPod, Name: pod.Name, Object: out}
}

// rescuable: without a membership to read, a Pod that the kubelet cannot
// run, on an image other than the target, gets the target image at once,
// as withMembership does for a member down on another image. It serves
// nothing as it is, and a single member that an upgrade broke leaves no
// etcd to read the membership from: setting the previous version back must
// rescue it all the same. The skew rule is held against the version etcd
// reported last.
func (p *planner) rescuable(pod *corev1.Pod) bool {
	if containerImage(pod) == p.spec.Image() || podReady(pod) || podFailure(pod) == "" {
		return false
	}
	// Across a minor downgrade only etcd's protocol may change a
	// member's release, and without a membership nobody can see where it
	// stands.
	current := p.o.Cluster.Status.CurrentVersion
	ok, _ := versionChangeAllowed(current, p.spec.Version)
	return ok && !needsDowngradeProtocol(current, p.spec.Version)
}

// upgradeState says where a rolling change of version stands.
type upgradeState struct {
	pending []memberView // members whose Pod runs another image
	done    int          // members that run the target, answer and have caught up
	// upgrading names a member already on the target image that does not
	// run it healthily yet, and what it is at: restarting, catching up.
	// The rollout waits for it.
	upgrading string
	// halted names a member on the target image whose Pod the kubelet
	// reports failing: the rollout goes no further until it runs.
	halted string
	// downgrade is where etcd's downgrade protocol stands, when the
	// change is one.
	downgrade downgradeState
}

func (p *planner) upgradeState(views []memberView, leader memberView) upgradeState {
	st := upgradeState{downgrade: p.downgradeState(views, leader)}
	target := p.spec.Image()
	for _, v := range views {
		if v.pod != nil && containerImage(v.pod) != target {
			st.pending = append(st.pending, v)
		}
	}
	// Only a rollout, or its last member still on its way, has anything to
	// wait for: a member of a cluster at rest that is unwell is the other
	// steps' business.
	if len(st.pending) == 0 && !p.rolling() {
		return st
	}
	for _, v := range views {
		if v.pod == nil || containerImage(v.pod) != target {
			// Not upgraded: no Pod, or one on another image.
			continue
		}
		if p.runsTarget(v, leader) {
			st.done++
			continue
		}
		if why := podFailure(v.pod); why != "" {
			st.halted = fmt.Sprintf("member %s on %s is not healthy: %s", v.name, target, why)
			break
		}
		if st.upgrading == "" {
			st.upgrading = fmt.Sprintf("member %s, which %s", v.name, p.upgradeProgress(v))
		}
	}
	return st
}

// rolling: the previous status reported a rollout under way, so the
// members it changed last are still to be seen running the target.
func (p *planner) rolling() bool {
	for _, c := range p.o.Cluster.Status.Conditions {
		if c.Type == v1beta2.ConditionUpgrading {
			return c.Status == metav1.ConditionTrue && p.o.Cluster.Status.TargetVersion == p.spec.Version
		}
	}
	return false
}

// runsTarget: the member answers, reports the target version, and has
// caught up with the leader, so the next member may go.
func (p *planner) runsTarget(v, leader memberView) bool {
	want, _ := parseVersion(p.spec.Version)
	got, ok := parseVersion(v.Version)
	if !readyOn(v.pod, p.spec.Image()) || !v.Reachable || !ok || got != want {
		return false
	}
	return v.ID == leader.ID || membership.LearnerCaughtUp(v.Member, leader.Member)
}

// upgradeProgress says what a member on the target image is waiting for.
// It names no raft index: the status would change on every sync, and each
// change of status makes Metacontroller sync again at once.
func (p *planner) upgradeProgress(v memberView) string {
	switch {
	case !readyOn(v.pod, p.spec.Image()):
		return "is restarting on " + p.spec.Version
	case !v.Reachable:
		return "does not answer yet"
	case v.Version != p.spec.Version:
		return fmt.Sprintf("still runs %s", v.Version)
	}
	return "is catching up with the leader"
}

// upgrade changes one member's image, leader last, after leadership has
// moved away from it.
func (p *planner) upgrade(views []memberView, leader memberView, st upgradeState) stepResult {
	switch {
	case st.halted != "":
		return waiting(ReasonUpgradeHalted, "upgrade halted: "+st.halted)
	case st.upgrading != "":
		return waiting(ReasonRollingUpgrade, "upgrading "+st.upgrading)
	}
	var held []string
	for _, v := range st.pending {
		switch {
		case !p.mayGetTarget(v, st.downgrade):
			held = append(held, v.name)
		case v.ID != leader.ID:
			return p.reimageStep(v)
		}
	}
	if len(held) > 0 {
		return waiting(ReasonDowngrading, fmt.Sprintf("downgrading to %s: waiting for %s to report its storage version lowered to %s", p.spec.Version, strings.Join(held, ", "), st.downgrade.target))
	}
	if len(views) == 1 {
		// A single member has nobody to hand leadership to: the restart
		// on the new image is an outage it cannot avoid, and refusing it
		// would leave the cluster on the old version for good.
		return p.reimageStep(leader)
	}
	return p.moveLeaderOff(views, leader, fmt.Sprintf("before %s is upgraded", leader.name))
}

func (p *planner) reimageStep(v memberView) stepResult {
	return stepResult{
		reimage:     v.pod,
		progressing: conditionTrue(ReasonRollingUpgrade, fmt.Sprintf("upgrading member %s to %s", v.name, p.spec.Version)),
		resync:      resyncWaiting,
	}
}

// upgradingCondition reports the rollout for the Upgrading condition.
func (p *planner) upgradingCondition(views []memberView, st upgradeState, step stepResult) condition {
	verb := "upgrad"
	if st.downgrade.above || st.downgrade.enabled != "" {
		verb = "downgrad"
	}
	switch {
	case st.halted != "":
		return conditionTrue(ReasonUpgradeHalted, verb+"e halted: "+st.halted)
	case st.downgrade.enabled != "" && st.downgrade.enabled != st.downgrade.target:
		return conditionTrue(ReasonDowngrading, fmt.Sprintf("etcd's downgrade to %s is enabled and spec.version is %s: cancelling it", st.downgrade.enabled, p.spec.Version))
	case len(st.pending) == 0 && st.upgrading == "" && st.downgrade.finishing:
		return conditionTrue(ReasonDowngrading, fmt.Sprintf("every member runs %s; etcd is ending its downgrade to %s", p.spec.Version, st.downgrade.target))
	case len(st.pending) == 0 && st.upgrading == "":
		return conditionFalse(ReasonUpToDate, "every member runs "+p.spec.Image())
	}
	msg := fmt.Sprintf("%d of %d members run %s", st.done, len(views), p.spec.Version)
	if len(st.pending) > 0 {
		names := make([]string, len(st.pending))
		for i, v := range st.pending {
			names[i] = v.name
		}
		msg += fmt.Sprintf("; still to %se: %s", verb, strings.Join(names, ", "))
	}
	switch {
	case step.reimage != nil:
		msg = fmt.Sprintf("%sing member %s; %s", verb, step.reimage.Name, msg)
	case st.upgrading != "":
		msg = fmt.Sprintf("%sing %s; %s", verb, st.upgrading, msg)
	case step.progressing.reason == ReasonDowngrading:
		msg = step.progressing.message + "; " + msg
	}
	return conditionTrue(ReasonRollingUpgrade, msg)
}
