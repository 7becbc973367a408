package etcdcluster

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// observe fills in the parts of the report that only describe: readiness,
// size, versions, quorum. Decisions add to it.
func (p *planner) observe() observation {
	o := p.o
	var r observation
	if ms := o.Membership; ms != nil {
		r.size = len(ms.Members)
		for _, m := range ms.Members {
			name := membership.MemberName(m, o.Cluster.Name)
			if podReady(o.Pods[name]) {
				r.ready = append(r.ready, name)
			} else {
				r.unready = append(r.unready, name)
			}
		}
		r.version = p.lowestVersion()
		r.phase, r.available = p.quorumPhase(ms)
		if r.available.reason == ReasonQuorumLost {
			r.problem(ReasonQuorumLost, r.available.message)
		}
		r.problems = append(r.problems, p.alarmProblems()...)
	} else {
		r.size = len(o.Pods)
		for name, pod := range o.Pods {
			if podReady(pod) {
				r.ready = append(r.ready, name)
			} else {
				r.unready = append(r.unready, name)
			}
		}
		r.phase, r.available = p.unreachablePhase(len(r.ready))
		if r.phase != v1beta2.PhaseCreating {
			r.problem(r.available.reason, r.available.message)
		}
	}
	// A member the scheduler cannot place is reported as such, with the
	// rules that hold it; the others as not ready.
	unready := r.unready
	if len(r.unready) > 0 || len(r.ready) < len(o.Pods) {
		unready = p.unschedulableMembers(&r, r.unready)
	}
	if len(unready) > 0 && r.phase != v1beta2.PhaseCreating {
		r.problem(ReasonMembersUnready, "members not ready: "+strings.Join(sorted(unready), ", "))
	}
	if fields := unhonouredFields(p.spec); len(fields) > 0 {
		r.problem(ReasonFieldsNotHonoured, "accepted but not honoured yet: "+strings.Join(fields, ", "))
	}
	r.progressing = conditionFalse(ReasonConverged, "the cluster matches its spec")
	r.upgrading = p.podImagesCondition()
	return r
}

// podImagesCondition judges a version change from the Pods alone, for
// syncs without a usable membership. Without etcd's word no member can be
// seen running the target, so a rollout under way stays under way.
func (p *planner) podImagesCondition() condition {
	var behind, failing []string
	rolling := p.rolling()
	for name, pod := range p.o.Pods {
		switch {
		case containerImage(pod) != p.spec.Image():
			behind = append(behind, name)
		case rolling && podFailure(pod) != "":
			failing = append(failing, fmt.Sprintf("member %s on %s is not healthy: %s", name, p.spec.Image(), podFailure(pod)))
		}
	}
	switch {
	case len(failing) > 0:
		return conditionTrue(ReasonUpgradeHalted, "upgrade halted: "+strings.Join(sorted(failing), "; "))
	case len(behind) > 0:
		return conditionTrue(ReasonRollingUpgrade, fmt.Sprintf("members not yet on %s: %s", p.spec.Image(), strings.Join(sorted(behind), ", ")))
	case rolling:
		return conditionTrue(ReasonRollingUpgrade, "upgrading to "+p.spec.Version+": etcd does not answer, so no member is seen running it yet")
	}
	return conditionFalse(ReasonUpToDate, "every member runs "+p.spec.Image())
}

// quorumPhase says whether etcd can commit, from the members that answered.
func (p *planner) quorumPhase(ms *membership.Membership) (v1beta2.ClusterPhase, condition) {
	voters := ms.VoterCount()
	up := membership.HealthyVoters(ms)
	if ms.Stale || !membership.HasQuorum(ms) || ms.LeaderID == 0 {
		var down []string
		for _, m := range ms.Voters() {
			if !m.Reachable {
				down = append(down, membership.MemberName(m, p.o.Cluster.Name))
			}
		}
		msg := fmt.Sprintf("quorum lost: %d of %d voting members answer, %d needed; unreachable: %s. %s",
			up, voters, membership.Quorum(voters), strings.Join(sorted(down), ", "), p.recoveryAdvice())
		return v1beta2.PhaseFailed, conditionFalse(ReasonQuorumLost, msg)
	}
	phase := v1beta2.PhaseRunning
	if prev := p.o.Cluster.Status.Phase; (prev == "" || prev == v1beta2.PhaseCreating) && !p.converged(ms) {
		phase = v1beta2.PhaseCreating
	}
	return phase, conditionTrue(ReasonQuorumHealthy, strconv.Itoa(up)+" of "+strconv.Itoa(voters)+" voting members answer; a leader is elected")
}

// unreachablePhase judges a cluster whose membership could not be read,
// from the kubelet's readiness probes alone.
func (p *planner) unreachablePhase(readyPods int) (v1beta2.ClusterPhase, condition) {
	prev := p.o.Cluster.Status
	why := p.o.MembershipError
	if why == "" {
		why = "no member Pod is running yet"
	}
	if prev.Phase == "" || prev.Phase == v1beta2.PhaseCreating {
		return v1beta2.PhaseCreating, condition{metav1.ConditionFalse, ReasonBootstrapping, "etcd is not answering yet: " + why}
	}
	if prev.Phase == v1beta2.PhaseHibernated {
		// Waking: no member ran, so none is lost; the phase turns Running
		// once etcd answers.
		return v1beta2.PhaseHibernated, conditionFalse(ReasonWaking, "waking from hibernation: etcd is not answering yet: "+why)
	}
	expected := max(prev.Size, len(p.o.Pods), 1)
	if readyPods >= membership.Quorum(expected) {
		return prev.Phase, condition{metav1.ConditionUnknown, ReasonEtcdUnreachable,
			fmt.Sprintf("the hook cannot read the membership (%s), but %d of %d member Pods are ready", why, readyPods, expected)}
	}
	return v1beta2.PhaseFailed, conditionFalse(ReasonQuorumLost,
		fmt.Sprintf("quorum lost: %d of %d member Pods are ready and etcd does not answer (%s). %s", readyPods, expected, why, p.recoveryAdvice()))
}

func (p *planner) recoveryAdvice() string {
	if p.spec.Persistent() {
		return "Members keep their data on PVCs and the cluster recovers when they return."
	}
	return "Members keep their data on emptyDir volumes: if they do not come back the data is gone and the cluster needs a restore from backup."
}

// converged: the membership is the size asked for, every member is a
// started voter, and every member's Pod is ready.
func (p *planner) converged(ms *membership.Membership) bool {
	if len(ms.Members) != p.spec.Size {
		return false
	}
	for _, m := range ms.Members {
		if m.IsLearner || !m.Started() || !podReady(p.o.Pods[membership.MemberName(m, p.o.Cluster.Name)]) {
			return false
		}
	}
	return true
}

func sorted(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

func podUsesClaim(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == dataVolume && v.PersistentVolumeClaim != nil {
			return true
		}
	}
	return false
}
