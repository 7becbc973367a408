package etcdcluster

import (
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// Reasons used in conditions and status.reason. They are part of the API:
// users alert on them.
const (
	ReasonAsExpected        = "AsExpected"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonPaused            = "Paused"
	ReasonBootstrapping     = "Bootstrapping"
	ReasonScalingUp         = "ScalingUp"
	ReasonScalingDown       = "ScalingDown"
	ReasonPromotingLearner  = "PromotingLearner"
	ReasonWaitingForMember  = "WaitingForMember"
	ReasonReplacingMember   = "ReplacingDeadMember"
	ReasonRecoveringMembers = "RecoveringMembers"
	ReasonMovingLeader      = "MovingLeader"
	ReasonActionFailed      = "MembershipActionFailed"
	ReasonConverged         = "Converged"
	ReasonQuorumHealthy     = "QuorumHealthy"
	ReasonQuorumLost        = "QuorumLost"
	ReasonEtcdUnreachable   = "EtcdUnreachable"
	ReasonMembersUnready    = "MembersUnready"
	ReasonDeadMember        = "DeadMember"
	ReasonAllMembersLost    = "AllMembersLost"
	// ReasonChildrenNotObserved: a cluster that ran, in a request with no
	// child at all; see nothingObserved.
	ReasonChildrenNotObserved = "ChildrenNotObserved"
	ReasonFieldsNotHonoured   = "FieldsNotHonoured"
	ReasonDeleting            = "Deleting"
)

type condition struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

func conditionTrue(reason, message string) condition {
	return condition{metav1.ConditionTrue, reason, message}
}

func conditionFalse(reason, message string) condition {
	return condition{metav1.ConditionFalse, reason, message}
}

// observation gathers what the status will say, as the planner learns it.
type observation struct {
	phase       v1beta2.ClusterPhase
	reason      string
	available   condition
	progressing condition
	upgrading   condition
	problems    []problem
	paused      bool
	ready       []string
	unready     []string
	size        int
	version     string
}

type problem struct{ reason, message string }

func (r *observation) problem(reason, message string) {
	r.problems = append(r.problems, problem{reason, message})
}

// severity orders problems, most severe first; unlisted reasons come last.
var severity = map[string]int{
	ReasonInvalidSpec:         1,
	ReasonTLSChangeRefused:    1,
	ReasonTLSSecretInvalid:    1,
	ReasonVersionSkew:         1,
	ReasonDowngradeRefused:    1,
	ReasonVolumeChangeRefused: 1,
	ReasonVolumeResizeFailed:  2,
	ReasonAllMembersLost:      2,
	ReasonRestoreFailed:       2,
	ReasonRestoreRefused:      2,
	ReasonChildrenNotObserved: 2,
	ReasonCorrupt:             2,
	ReasonFinalBackupFailed:   2,
	ReasonWritesFenced:        3,
	ReasonQuorumLost:          3,
	ReasonNoSpace:             3,
	ReasonDeadMember:          4,
	ReasonEtcdUnreachable:     5,
}

func rank(reason string) int {
	if r, ok := severity[reason]; ok {
		return r
	}
	return len(severity) + 1
}

// degraded folds every problem into one condition, named after the most
// severe.
func (r *observation) degraded() condition {
	if len(r.problems) == 0 {
		return conditionFalse(ReasonAsExpected, "no problem observed")
	}
	sort.SliceStable(r.problems, func(i, j int) bool { return rank(r.problems[i].reason) < rank(r.problems[j].reason) })
	messages := make([]string, len(r.problems))
	for i, p := range r.problems {
		messages[i] = p.message
	}
	return conditionTrue(r.problems[0].reason, strings.Join(messages, "; "))
}

// status renders the report. A condition's lastTransitionTime is carried
// over from the previous status unless its status flips, so a steady
// cluster's status does not change from one sync to the next: Metacontroller
// would write every change and sync again on it.
func (p *planner) status(r observation) v1beta2.ClusterStatus {
	c := p.o.Cluster
	prev := c.Status
	sort.Strings(r.ready)
	sort.Strings(r.unready)
	version := r.version
	if version == "" {
		version = prev.CurrentVersion
	}
	degraded := r.degraded()
	if r.reason == "" && len(r.problems) > 0 {
		r.reason = r.problems[0].message
	}
	st := v1beta2.ClusterStatus{
		ObservedGeneration: c.Generation,
		Phase:              r.phase,
		Reason:             r.reason,
		ControlPaused:      r.paused,
		Size:               r.size,
		ReadyMembers:       len(r.ready),
		Members:            v1beta2.MembersStatus{Ready: r.ready, Unready: r.unready, Placement: p.placement()},
		ServiceName:        plan.ClientServiceName(c.Name),
		ClientPort:         plan.ClientPort,
		CurrentVersion:     version,
		TargetVersion:      p.spec.Version,
		Bootstrap:          p.rec,
		Restore:            p.restoreStatus,
		NewestBackup:       p.newest,
		Housekeeping:       p.housekeepingRecord(),
		Storage:            p.storageStatus(),
		Hibernation:        p.hibernationRecord(),
	}
	st.TLS = p.tlsStatus()
	st.Auth = p.authStatus(nil)
	if rs := p.restoreStatus; rs != nil && rs.Phase == v1beta2.RestoreRestoring && p.rec != nil && p.rec.Restore != nil &&
		p.rec.Restore.Request == rs.Request && r.phase == v1beta2.PhaseRunning && len(r.ready) == p.spec.Size && r.size == p.spec.Size {
		done := *rs
		done.Phase = v1beta2.RestoreCompleted
		st.Restore = &done
	} else if rs != nil && rs.Phase == v1beta2.RestoreRestoring && r.progressing.status != metav1.ConditionTrue {
		r.progressing = conditionTrue(ReasonRestoring, rs.Message)
	}
	// Room for the kstatus conditions that health.go appends.
	st.Conditions = make([]v1beta2.ClusterCondition, 0, 8)
	for _, cc := range []struct {
		t v1beta2.ConditionType
		c condition
	}{
		{v1beta2.ConditionAvailable, r.available},
		{v1beta2.ConditionProgressing, r.progressing},
		{v1beta2.ConditionDegraded, degraded},
		{v1beta2.ConditionUpgrading, r.upgrading},
	} {
		st.Conditions = append(st.Conditions, p.condition(cc.t, cc.c))
	}
	if c, ok := p.adoptedCondition(p.adoption()); ok {
		st.Conditions = append(st.Conditions, p.condition(v1beta2.ConditionAdopted, c))
	}
	if c, ok := p.certificatesCondition(&st); ok {
		st.Conditions = append(st.Conditions, p.condition(v1beta2.ConditionCertificatesReady, c))
	}
	return st
}

func (p *planner) condition(t v1beta2.ConditionType, c condition) v1beta2.ClusterCondition {
	out := v1beta2.ClusterCondition{Type: t, Status: c.status, Reason: c.reason, Message: c.message}
	if c.status == "" {
		out.Status = metav1.ConditionUnknown
	}
	out.LastTransitionTime = metav1.NewTime(p.o.Now.UTC().Truncate(1e9))
	for _, prev := range p.o.Cluster.Status.Conditions {
		if prev.Type == t && prev.Status == out.Status && !prev.LastTransitionTime.IsZero() {
			out.LastTransitionTime = prev.LastTransitionTime
		}
	}
	return out
}

// unhonouredFields lists spec fields that are accepted for compatibility
// with the CoreOS operator's manifests but change nothing yet.
func unhonouredFields(spec v1beta2.ClusterSpec) []string {
	var out []string
	if spec.Pod != nil && spec.Pod.BusyboxImage != "" {
		out = append(out, "spec.pod.busyboxImage (there is no init container)")
	}
	if spec.Pod != nil && spec.Pod.DNSTimeoutInSecond != 0 {
		out = append(out, "spec.pod.DNSTimeoutInSecond (there is no init container)")
	}
	return out
}
