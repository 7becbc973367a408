package sync

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Reasons of the Upgrading condition.
const (
	ReasonUpToDate       = "UpToDate"
	ReasonRollingUpgrade = "RollingUpgrade"
	ReasonUpgradeHalted  = "UpgradeHalted"
	ReasonVersionSkew    = "VersionSkewRefused"
)

// versionChangeAllowed applies etcd's rule for rolling upgrades: one minor
// version at a time, patch versions freely in either direction, and no
// downgrade across a minor version (etcd's data may already use the newer
// minor's format). running is the lowest version a member runs.
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
	case to.minor < from.minor:
		return false, fmt.Sprintf("spec.version %s is a downgrade from %s across a minor version, which etcd does not support in a rolling change; only patch-level downgrades are", target, running)
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

// podTrouble explains why a Pod's etcd container is not ready, from the
// kubelet's own words.
func podTrouble(pod *corev1.Pod) string {
	if pod == nil {
		return "its Pod is gone"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != "etcd" {
			continue
		}
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return strings.TrimSpace(w.Reason + ": " + w.Message)
		}
		if t := cs.LastTerminationState.Terminated; t != nil && cs.RestartCount > 0 {
			return fmt.Sprintf("restarted %d times, last exit %d (%s)", cs.RestartCount, t.ExitCode, t.Reason)
		}
	}
	return "its Pod is not ready (phase " + string(pod.Status.Phase) + ")"
}

// reimagedPod is a kept Pod with the target image: the one change
// Kubernetes allows to a Pod in place. The member keeps its name, identity
// and data; the kubelet restarts its container on the new binary.
func (p *planner) reimagedPod(pod *corev1.Pod) Child {
	kept := keepPod(pod)
	var out corev1.Pod
	switch obj := kept.Object.(type) {
	case json.RawMessage:
		if err := json.Unmarshal(obj, &out); err != nil {
			return kept
		}
	case *corev1.Pod:
		out = *obj.DeepCopy()
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
	out.APIVersion, out.Kind = "v1", "Pod"
	return Child{Kind: KindPod, Name: pod.Name, Object: &out}
}

// upgradeState says where a rolling change of version stands.
type upgradeState struct {
	pending []memberView // members whose Pod runs another image
	// halted names a member already on the target image that is not
	// healthy on it: the rollout goes no further until it is.
	halted string
}

func (p *planner) upgradeState(views []memberView, leader memberView) upgradeState {
	var st upgradeState
	target := p.spec.Image()
	var upgraded []memberView
	for _, v := range views {
		switch {
		case v.pod == nil:
		case containerImage(v.pod) != target:
			st.pending = append(st.pending, v)
		default:
			upgraded = append(upgraded, v)
		}
	}
	if len(st.pending) == 0 {
		return st
	}
	for _, v := range upgraded {
		if !p.runsTarget(v, leader) {
			st.halted = fmt.Sprintf("member %s on %s is not healthy: %s", v.name, target, p.memberTrouble(v))
			break
		}
	}
	return st
}

// runsTarget: the member answers, reports the target version, and has
// caught up with the leader, so the next member may go.
func (p *planner) runsTarget(v, leader memberView) bool {
	want, _ := parseVersion(p.spec.Version)
	got, ok := parseVersion(v.Version)
	if !v.ready || !v.Reachable || !ok || got != want {
		return false
	}
	return v.ID == leader.ID || learnerCaughtUp(v.Member, leader.Member)
}

func (p *planner) memberTrouble(v memberView) string {
	if v.ready && v.Reachable {
		return fmt.Sprintf("it reports version %q and raft index %d", v.Version, v.RaftIndex)
	}
	return podTrouble(v.pod)
}

// upgrade changes one member's image, leader last, after leadership has
// moved away from it.
func (p *planner) upgrade(views []memberView, leader memberView, st upgradeState) stepResult {
	if st.halted != "" {
		return waiting(ReasonUpgradeHalted, "upgrade halted: "+st.halted)
	}
	for _, v := range st.pending {
		if v.ID != leader.ID {
			return stepResult{
				reimage:     v.pod,
				progressing: conditionTrue(ReasonRollingUpgrade, fmt.Sprintf("upgrading member %s to %s", v.name, p.spec.Version)),
				resync:      resyncWaiting,
			}
		}
	}
	return p.moveLeaderOff(views, leader, fmt.Sprintf("before %s is upgraded", leader.name))
}

// upgradingCondition reports the rollout for the Upgrading condition.
func (p *planner) upgradingCondition(views []memberView, st upgradeState, step stepResult) condition {
	switch {
	case step.progressing.reason == ReasonUpgradeHalted:
		return conditionTrue(ReasonUpgradeHalted, step.progressing.message)
	case len(st.pending) == 0:
		return conditionFalse(ReasonUpToDate, "every member runs "+p.spec.Image())
	}
	names := make([]string, len(st.pending))
	for i, v := range st.pending {
		names[i] = v.name
	}
	msg := fmt.Sprintf("%d of %d members run %s; still to upgrade: %s", len(views)-len(st.pending), len(views), p.spec.Version, strings.Join(names, ", "))
	if step.reimage != nil {
		msg = fmt.Sprintf("upgrading member %s; %s", step.reimage.Name, msg)
	}
	return conditionTrue(ReasonRollingUpgrade, msg)
}
