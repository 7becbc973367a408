package etcdcluster

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// GitOps health: the conditions Ready, Reconciling and Stalled, with the
// meaning kstatus gives them (sigs.k8s.io/cli-utils/pkg/kstatus), which
// Flux's health checks, kubectl wait and the Argo CD check in
// manifests/gitops read. They summarise the rest of the status as it is
// rendered, so they are derived last (Plan defers health).
//
// Metacontroller writes observedGeneration on every successful sync,
// before the children converge, so these conditions carry the truth:
//   - Stalled=True when the hook cannot go on without a person. Its reason
//     is the problem's: InvalidSpec, TLSChangeRefused, TLSSecretInvalid (a
//     Secret that is there but unusable; a missing one is waited for),
//     VersionSkewRefused, AllMembersLost, RestoreFailed, RestoreRefused,
//     RolloutHalted, UpgradeHalted, Corrupt (etcd's CORRUPT alarm),
//     NoSpace (the NOSPACE alarm, unless spec.housekeeping recovers from
//     it), and QuorumLost once confirmed (see quorumLossConfirmed).
//   - Reconciling=True while the hook moves the cluster toward its spec:
//     bootstrapping, scaling, upgrading, rolling out a Pod spec change,
//     restoring, waiting for a member it added.
//   - Ready=True when the cluster matches its spec: spec.size members,
//     every one a started voter whose Pod is ready, on the target image
//     and Pod spec, on the target version, with a leader, and no problem
//     but fields accepted and not yet honoured.
//
// Reconciling and Stalled are never both True. A paused cluster is
// neither: see pausedHealth.

// QuorumLossConfirmAfter is how long a loss of quorum must have been
// reported before it counts as Stalled. Flux fails a health check at the
// first Stalled=True it sees, so a blip must not reach it: an election
// takes a second or two, and a killed member's container is back in
// seconds. A loss that outlasts this, with no member on its way, is one a
// person has to look at.
const QuorumLossConfirmAfter = 15 * time.Second

// stallingProblems are the Degraded reasons that need a person.
var stallingProblems = map[string]bool{
	ReasonInvalidSpec:      true,
	ReasonTLSChangeRefused: true,
	ReasonTLSSecretInvalid: true,
	ReasonVersionSkew:      true,
	ReasonAllMembersLost:   true,
	ReasonRestoreFailed:    true,
	ReasonRestoreRefused:   true,
	// A volume that cannot grow (or shrink) as asked: the spec or the
	// StorageClass must change, or the driver's error be seen to.
	ReasonVolumeChangeRefused: true,
	ReasonVolumeResizeFailed:  true,
	// A CoreOS cluster left mid-upgrade or mid-scale does not settle by
	// itself once that operator is stopped.
	ReasonTakeoverWaiting: true,
}

// softProblems are Degraded reasons that do not keep a cluster from Ready.
var softProblems = map[string]bool{ReasonFieldsNotHonoured: true}

const msgNotStalled = "nothing needs a person"

// healthConditions are the three kstatus conditions of one status.
type healthConditions struct{ ready, reconciling, stalled condition }

// withHealth replaces the kstatus conditions of a rendered status.
func (p *planner) withHealth(st *v1beta2.ClusterStatus) {
	h := p.health(st)
	// Filtered in place: status() leaves room for the three.
	out := st.Conditions[:0]
	for _, c := range st.Conditions {
		switch c.Type {
		case v1beta2.ConditionReady, v1beta2.ConditionReconciling, v1beta2.ConditionStalled:
		default:
			out = append(out, c)
		}
	}
	st.Conditions = append(out,
		p.condition(v1beta2.ConditionReady, h.ready),
		p.condition(v1beta2.ConditionReconciling, h.reconciling),
		p.condition(v1beta2.ConditionStalled, h.stalled))
}

func (p *planner) health(st *v1beta2.ClusterStatus) healthConditions {
	v := statusView{st}
	if st.ControlPaused {
		return p.pausedHealth(v)
	}
	if st.Phase == v1beta2.PhaseHibernated && p.spec.Hibernated {
		return hibernatedHealth(st.Reason)
	}
	if reason, msg := p.stalledBy(v); reason != "" {
		return healthConditions{
			ready:       conditionFalse(reason, msg),
			reconciling: conditionFalse(reason, "the hook cannot go on without a person; see the Stalled condition"),
			stalled:     conditionTrue(reason, msg),
		}
	}
	notStalled := conditionFalse(ReasonAsExpected, msgNotStalled)
	if reason, msg := p.reconcilingBy(v); reason != "" {
		return healthConditions{ready: conditionFalse(reason, msg), reconciling: conditionTrue(reason, msg), stalled: notStalled}
	}
	prog := v.get(v1beta2.ConditionProgressing)
	idle := conditionFalse(prog.Reason, prog.Message)
	if prog.Reason == "" {
		idle = conditionFalse(ReasonConverged, "the hook has nothing to do")
	}
	if reason, msg := p.notReadyBy(v); reason != "" {
		return healthConditions{ready: conditionFalse(reason, msg), reconciling: idle, stalled: notStalled}
	}
	// Every steady sync writes this: no fmt on the steady path.
	msg := strconv.Itoa(st.ReadyMembers) + " of " + strconv.Itoa(p.spec.Size) + " members ready on " + p.spec.Image() + ", a leader elected"
	return healthConditions{ready: conditionTrue(ReasonConverged, msg), reconciling: idle, stalled: notStalled}
}

// pausedHealth: spec.paused is a person's decision that the hook leave
// the cluster alone, so nothing is Reconciling and nothing is Stalled. A
// paused cluster that serves (a quorum and a leader) is Ready, which
// kstatus reads as Current: a GitOps tool waiting for health goes on
// instead of timing out on a pause made on purpose. Argo CD's check calls
// it Suspended (status.controlPaused), as it does a suspended CronJob.
func (p *planner) pausedHealth(v statusView) healthConditions {
	msg := "spec.paused is true: the hook leaves the cluster as it is"
	ready := conditionFalse(ReasonPaused, msg+"; it does not serve: "+v.get(v1beta2.ConditionAvailable).Message)
	if v.get(v1beta2.ConditionAvailable).Status == metav1.ConditionTrue {
		ready = conditionTrue(ReasonPaused, fmt.Sprintf("%s; %d members ready, a leader elected", msg, v.st.ReadyMembers))
	}
	return healthConditions{ready: ready, reconciling: conditionFalse(ReasonPaused, msg), stalled: conditionFalse(ReasonPaused, msg)}
}

// stalledBy names what the hook cannot get past without a person, or "".
func (p *planner) stalledBy(v statusView) (reason, message string) {
	deg, prog, upg := v.get(v1beta2.ConditionDegraded), v.get(v1beta2.ConditionProgressing), v.get(v1beta2.ConditionUpgrading)
	switch {
	case deg.Status == metav1.ConditionTrue && stallingProblems[deg.Reason] &&
		(deg.Reason != ReasonTLSSecretInvalid || !p.tlsSecretsOnlyMissing()):
		return deg.Reason, deg.Message
	case prog.Reason == ReasonRolloutHalted:
		return ReasonRolloutHalted, prog.Message
	case upg.Status == metav1.ConditionTrue && upg.Reason == ReasonUpgradeHalted:
		return ReasonUpgradeHalted, upg.Message
	case prog.Reason == ReasonNoSpace:
		// spec.housekeeping compacted and defragmented, and the database
		// is still too full: keys must go, or the quota grow.
		return ReasonNoSpace, prog.Message
	}
	for _, a := range p.alarmProblems() {
		// CORRUPT is always a person's; NOSPACE is unless spec.housekeeping
		// recovers from it, which then shows as Reconciling.
		if a.reason == ReasonCorrupt || (a.reason == ReasonNoSpace && !p.spec.Housekeeping.RecoversNoSpace()) {
			return a.reason, a.message
		}
	}
	switch {
	case p.quorumLossConfirmed(v):
		avail := v.get(v1beta2.ConditionAvailable)
		return ReasonQuorumLost, avail.Message
	}
	return "", ""
}

// tlsSecretsOnlyMissing: every TLS problem is a Secret not there (yet).
// cert-manager, or a GitOps tool applying the Secret after the cluster,
// brings it moments later, so the cluster waits for it (Ready False)
// rather than fail a health check; a Secret that is there but unusable
// needs a person.
func (p *planner) tlsSecretsOnlyMissing() bool {
	missing := 0
	for _, s := range p.tlsSecrets() {
		secret, ok := p.secret(s.name)
		switch {
		case !ok:
			missing++
		case plan.CheckTLSSecret(secret, s.SecretKeys, s.hostsToServe, p.o.Now) != "":
			return false
		}
	}
	return missing > 0
}

// quorumLossConfirmed: the loss of quorum is reported by this sync and
// was by the previous status already, QuorumLossConfirmAfter ago or
// more, and nothing explains it as a passing moment: no step of the
// hook's own under way (an upgrade or roll restarts a member, and a
// cluster of one has no quorum meanwhile), no member Pod starting.
func (p *planner) quorumLossConfirmed(v statusView) bool {
	avail, prog, upg := v.get(v1beta2.ConditionAvailable), v.get(v1beta2.ConditionProgressing), v.get(v1beta2.ConditionUpgrading)
	if avail.Status != metav1.ConditionFalse || avail.Reason != ReasonQuorumLost {
		return false
	}
	if prog.Status == metav1.ConditionTrue || (upg.Status == metav1.ConditionTrue && upg.Reason == ReasonRollingUpgrade) {
		return false
	}
	for _, pod := range p.o.Pods {
		if memberStarting(pod) {
			return false
		}
	}
	prev := statusView{&p.o.Cluster.Status}.get(v1beta2.ConditionAvailable)
	return prev.Status == metav1.ConditionFalse && prev.Reason == ReasonQuorumLost &&
		!avail.LastTransitionTime.IsZero() && p.o.Now.Sub(avail.LastTransitionTime.Time) >= QuorumLossConfirmAfter
}

// memberStarting: the kubelet is bringing the Pod up (scheduling, pulling
// the image, running init containers) and reports no failure.
func memberStarting(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && !podStarted(pod) && podFailure(pod) == ""
}

// reconcilingBy names what the hook is doing to move toward the spec, or "".
func (p *planner) reconcilingBy(v statusView) (reason, message string) {
	prog, upg, avail := v.get(v1beta2.ConditionProgressing), v.get(v1beta2.ConditionUpgrading), v.get(v1beta2.ConditionAvailable)
	switch {
	case prog.Status == metav1.ConditionTrue:
		return prog.Reason, prog.Message
	case upg.Status == metav1.ConditionTrue && upg.Reason == ReasonRollingUpgrade:
		return ReasonRollingUpgrade, upg.Message
	case v.st.Restore != nil && (v.st.Restore.Phase == v1beta2.RestoreVerifying || v.st.Restore.Phase == v1beta2.RestoreRestoring):
		return ReasonRestoring, v.st.Restore.Message
	case v.st.Phase == v1beta2.PhaseCreating && prog.Reason == ReasonRestoring:
		return ReasonRestoring, prog.Message
	}
	// Otherwise Progressing False says either that the hook is at rest
	// (Converged) or what blocks it; a blocked hook is not reconciling.
	if prog.Reason != "" && prog.Reason != ReasonConverged {
		return "", ""
	}
	if v.st.Phase == v1beta2.PhaseCreating {
		return ReasonBootstrapping, avail.Message
	}
	// A roll under way says so in Progressing; outdated members with the
	// hook at rest (a sync that rendered no step) are still to roll.
	if outdated := p.outdatedMembers(); len(outdated) > 0 {
		return ReasonRollingChange, "members on an earlier Pod spec: " + strings.Join(outdated, ", ")
	}
	return "", ""
}

// notReadyBy names the first way the cluster differs from its spec, or "".
func (p *planner) notReadyBy(v statusView) (reason, message string) {
	st, avail, deg, upg := v.st, v.get(v1beta2.ConditionAvailable), v.get(v1beta2.ConditionDegraded), v.get(v1beta2.ConditionUpgrading)
	switch {
	case deg.Status == metav1.ConditionTrue && !softProblems[deg.Reason]:
		return deg.Reason, deg.Message
	case avail.Status != metav1.ConditionTrue:
		return avail.Reason, avail.Message
	case st.Size != p.spec.Size:
		return ReasonWaitingForMember, fmt.Sprintf("%d members, spec.size is %d", st.Size, p.spec.Size)
	case st.ReadyMembers != p.spec.Size || len(st.Members.Unready) > 0:
		return ReasonMembersUnready, fmt.Sprintf("%d of %d members ready", st.ReadyMembers, p.spec.Size)
	case upg.Status != metav1.ConditionFalse || !sameVersion(st.CurrentVersion, p.spec.Version):
		return ReasonRollingUpgrade, fmt.Sprintf("members run %s, spec.version is %s", st.CurrentVersion, p.spec.Version)
	}
	if ms := p.o.Membership; ms != nil {
		for _, m := range ms.Members {
			if m.IsLearner || !m.Started() {
				return ReasonWaitingForMember, fmt.Sprintf("member %s is not a started voter yet", membership.MemberName(m, p.o.Cluster.Name))
			}
		}
	}
	var behind []string
	for name, pod := range p.o.Pods {
		if containerImage(pod) != p.spec.Image() {
			behind = append(behind, name)
		}
	}
	if len(behind) > 0 {
		name := sorted(behind)[0]
		return ReasonRollingUpgrade, fmt.Sprintf("member %s runs %s, not %s", name, containerImage(p.o.Pods[name]), p.spec.Image())
	}
	return "", ""
}

// outdatedMembers are the member Pods rendered from an earlier Pod spec.
func (p *planner) outdatedMembers() []string {
	var out []string
	for name, pod := range p.o.Pods {
		if p.outdated(pod) {
			out = append(out, name)
		}
	}
	return sorted(out)
}

func sameVersion(a, b string) bool {
	va, okA := parseVersion(a)
	vb, okB := parseVersion(b)
	return okA && okB && va == vb
}

// statusView finds conditions in a rendered status.
type statusView struct{ st *v1beta2.ClusterStatus }

func (v statusView) get(t v1beta2.ConditionType) v1beta2.ClusterCondition {
	for _, c := range v.st.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1beta2.ClusterCondition{}
}
