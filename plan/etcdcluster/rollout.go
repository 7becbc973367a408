package etcdcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// A change of spec reaches running members in one of two ways.
//
// Labels and annotations of spec.pod change in place: every sync answers
// each member Pod with the metadata the spec asks for now, which
// Metacontroller patches without a restart.
//
// Everything else a Pod is rendered from (resources, scheduling, security,
// environment, spec.etcd's flags) cannot change on a running Pod, so it
// rolls: one member at a time, followers first and the leader last (after
// leadership has moved), each step only once every member is ready and has
// caught up with the leader, and never while a version upgrade is under
// way (the upgrade goes first; see upgrade.go).
//   - A member whose data is on a claim keeps its identity: its Pod is
//     dropped from the answer, and once it is gone rendered again on the
//     same claim. No membership change.
//   - A member on an emptyDir cannot keep its data across Pods: a new
//     member joins as a learner and is promoted (the scale-up steps), and
//     then the outdated member is removed (the scale-down steps, which
//     prefer an outdated member). The cluster has one voter more meanwhile,
//     so its fault tolerance never drops below what it had.
//
// Which members are outdated is seen from the request alone: each member
// Pod carries AnnotationPodSpecHash, the hash of what it was rendered from.

// AnnotationPodSpecHash on a member Pod is the hash of the spec fields
// that only a new Pod can change, as its Pod was rendered from them.
const AnnotationPodSpecHash = v1beta2.Group + "/pod-spec-hash"

// Reasons of a rollout of a spec change.
const (
	ReasonRollingChange = "RollingChange"
	ReasonRolloutHalted = "RolloutHalted"
)

// rolledInputs are the spec fields a member Pod is rendered from that need
// a new Pod to change. Left out: labels and annotations (they change in
// place), the version (an upgrade changes the image in place), the claim
// spec (a claim outlives its Pods and cannot be resized through them), the
// cluster domain and TLS (they change the members' URLs, which a running
// member cannot take: a TLS change is refused, a domain change reaches new
// members only).
type rolledInputs struct {
	Resources                 corev1.ResourceRequirements       `json:"resources"`
	NodeSelector              map[string]string                 `json:"nodeSelector,omitempty"`
	Affinity                  *corev1.Affinity                  `json:"affinity,omitempty"`
	AntiAffinity              bool                              `json:"antiAffinity,omitempty"`
	Tolerations               []corev1.Toleration               `json:"tolerations,omitempty"`
	SecurityContext           *corev1.PodSecurityContext        `json:"securityContext,omitempty"`
	EtcdEnv                   []corev1.EnvVar                   `json:"etcdEnv,omitempty"`
	PriorityClassName         string                            `json:"priorityClassName,omitempty"`
	ImagePullSecrets          []corev1.LocalObjectReference     `json:"imagePullSecrets,omitempty"`
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// StrictSpread, not spec.pod.spread: "preferred" and unset render the
	// same Pods, and must not roll members when one is written for the
	// other.
	StrictSpread bool                 `json:"strictSpread,omitempty"`
	Etcd         v1beta2.EtcdSettings `json:"etcd"`
}

// podSpecHash hashes the inputs, not the rendered Pod: a later hook
// release that renders Pods differently rolls nothing by itself.
// Quantities serialize canonically, so "1024Mi" and "1Gi" hash the same.
func podSpecHash(spec v1beta2.ClusterSpec) string {
	in := rolledInputs{Etcd: *spec.Etcd.WithDefaults()}
	if pol := spec.Pod; pol != nil {
		in.Resources, in.NodeSelector, in.Affinity, in.AntiAffinity = pol.Resources, pol.NodeSelector, pol.Affinity, pol.AntiAffinity
		in.Tolerations, in.SecurityContext, in.EtcdEnv = pol.Tolerations, pol.SecurityContext, pol.EtcdEnv
		in.PriorityClassName, in.ImagePullSecrets, in.TopologySpreadConstraints = pol.PriorityClassName, pol.ImagePullSecrets, pol.TopologySpreadConstraints
		in.StrictSpread = pol.DefaultPlacement() && pol.SpreadOrDefault() == v1beta2.SpreadStrict
	}
	raw, err := json.Marshal(in)
	if err != nil {
		// Every field is plain data; this cannot happen.
		panic(fmt.Sprintf("hashing the pod spec: %v", err))
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// etcdSettingsFlags renders spec.etcd for the release line. A flag whose
// ETCD_* variable spec.pod.etcdEnv sets is left out: etcd refuses to start
// when both are given, and the README once advised the variable.
func etcdSettingsFlags(spec v1beta2.ClusterSpec) []string {
	e := spec.Etcd.WithDefaults()
	setByEnv := map[string]bool{}
	if spec.Pod != nil {
		for _, env := range spec.Pod.EtcdEnv {
			setByEnv[env.Name] = true
		}
	}
	var flags []string
	add := func(env, flag string) {
		if !setByEnv[env] {
			flags = append(flags, flag)
		}
	}
	add("ETCD_QUOTA_BACKEND_BYTES", fmt.Sprintf("--quota-backend-bytes=%d", e.QuotaBackendBytes))
	if v, ok := parseVersion(spec.Version); ok && v.less(semver{3, 3, 0}) {
		// Before 3.3: periodic only, in whole hours (validation refuses
		// anything else for these releases).
		if hours, ok := e.RetentionHours(); ok && e.AutoCompactionMode == "periodic" {
			add("ETCD_AUTO_COMPACTION_RETENTION", fmt.Sprintf("--auto-compaction-retention=%d", hours))
		}
		return flags
	}
	add("ETCD_AUTO_COMPACTION_MODE", "--auto-compaction-mode="+e.AutoCompactionMode)
	add("ETCD_AUTO_COMPACTION_RETENTION", "--auto-compaction-retention="+e.AutoCompactionRetention)
	return flags
}

// outdated: the member's Pod was rendered from a spec that differs in a
// field only a new Pod can change. A Pod without a hash was made by a hook
// release before hashes; nothing says what it was rendered from, so it is
// adopted (see currentPod) rather than restarted.
func (p *planner) outdated(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	h := pod.Annotations[AnnotationPodSpecHash]
	return h != "" && (h != p.podHash() || p.distrusting(pod) || p.remounting(pod) || p.awaitsRemount(pod))
}

func (p *planner) podHash() string {
	if p.hash == "" {
		if d := p.o.derived; d != nil && d.hashOf == p.o.Cluster {
			p.hash = d.podHash
		} else {
			p.hash = podSpecHash(p.spec)
		}
		p.hash = withRollout(p.hash, p.o.Cluster.Annotations[AnnotationRollout])
	}
	return p.hash
}

// withRollout folds the value of AnnotationRollout into a pod-spec hash,
// so that changing it outdates every member Pod. Without the annotation
// the hash is the spec's alone, as before the annotation existed.
func withRollout(hash, rollout string) string {
	if rollout == "" {
		return hash
	}
	sum := sha256.Sum256([]byte(hash + "/" + rollout))
	return hex.EncodeToString(sum[:8])
}

// hookAnnotation: the annotations the hook sets on a member Pod for its
// own records, which a change of spec.pod.annotations never touches.
func hookAnnotation(key string) bool {
	return key == AnnotationVersion || strings.HasPrefix(key, v1beta2.Group+"/")
}

// rolloutState says where the rollout of a spec change stands.
type rolloutState struct {
	pending []memberView // members whose Pod is outdated, by name
	// rolling names a member already on the current spec that does not
	// serve yet, and what it is at; the rollout waits for it.
	rolling string
	// halted names a member on the current spec that the kubelet reports
	// cannot run: the rollout goes no further until it runs, or the spec
	// is set back (and the member rolled back at once: see rescueRollout).
	halted string
}

func (p *planner) rolloutState(views []memberView, leader memberView) rolloutState {
	var st rolloutState
	// current: a started member whose Pod is on the current spec (or
	// which has none).
	current := func(v memberView) bool { return (v.pod == nil || !p.outdated(v.pod)) && v.Started() }
	for _, v := range views {
		switch {
		case v.pod != nil && v.pod.DeletionTimestamp != nil && v.persistent && p.outdated(v.pod):
			// Dropped by the previous step: its Pod is on its way out, and
			// comes back on the current spec.
			if st.rolling == "" {
				st.rolling = fmt.Sprintf("member %s, whose Pod is being deleted to get a new one", v.name)
			}
		case v.pod != nil && p.outdated(v.pod):
			st.pending = append(st.pending, v)
		}
	}
	if len(st.pending) == 0 && !p.rollingOut() {
		return st
	}
	for _, v := range views {
		if !current(v) {
			continue
		}
		if v.ready && (v.ID == leader.ID || caughtUp(v.Member, leader.Member)) {
			continue
		}
		if v.pod != nil {
			if why := podFailure(v.pod); why != "" {
				st.halted = fmt.Sprintf("member %s on the new spec cannot run: %s", v.name, why)
				break
			}
		}
		if st.rolling == "" {
			st.rolling = fmt.Sprintf("member %s, which %s", v.name, p.rolloutProgress(v, leader))
		}
	}
	return st
}

// rollingOut: the previous status reported a rollout, so the member it
// changed last is still to be seen serving on the current spec.
func (p *planner) rollingOut() bool {
	for _, c := range p.o.Cluster.Status.Conditions {
		if c.Type == v1beta2.ConditionProgressing {
			return c.Reason == ReasonRollingChange || c.Reason == ReasonRolloutHalted
		}
	}
	return false
}

func (p *planner) rolloutProgress(v, leader memberView) string {
	switch {
	case v.pod == nil:
		return "gets a new Pod"
	case !v.ready:
		return "is starting on the new spec"
	case !v.Reachable:
		return "does not answer yet"
	}
	return "is catching up with the leader"
}

// maxRestartLag is how many raft entries a member may trail the leader by
// and still count as caught up before the next member is rolled. It is a
// moment's worth of writes: Status is read from every member at once, and
// a busy leader is always a little ahead.
const maxRestartLag = 1000

// caughtUp: the member has the leader's log, or near enough.
func caughtUp(m, leader membership.Member) bool {
	return m.Reachable && leader.Reachable && leader.RaftIndex > 0 && m.RaftIndex+maxRestartLag >= leader.RaftIndex
}

// rollout takes the next step of a spec change, once every member is
// ready (nextStep has seen to that).
func (p *planner) rollout(views []memberView, leader memberView, st rolloutState) stepResult {
	switch {
	case st.halted != "":
		return blockedStep(ReasonRolloutHalted, "rollout halted: "+st.halted)
	case st.rolling != "":
		return waiting(ReasonRollingChange, "rolling out the spec change: waiting for "+st.rolling)
	}
	for _, v := range views {
		if v.ID != leader.ID && !caughtUp(v.Member, leader.Member) {
			return waiting(ReasonRollingChange, fmt.Sprintf("rolling out the spec change: waiting for member %s to catch up with the leader", v.name))
		}
	}
	next := -1
	for i, v := range st.pending {
		if v.ID != leader.ID {
			next = i
			break
		}
	}
	if next < 0 {
		// Only the leader is left. A member on a claim restarts: hand
		// leadership over first. One on an emptyDir is replaced through a
		// learner, and the scale-down that follows moves leadership.
		if leader.persistent && len(views) > 1 {
			return p.moveLeaderOff(views, leader, "before "+leader.name+" gets a Pod on the new spec")
		}
		next = 0
	}
	v := st.pending[next]
	if v.persistent {
		why := "rolling out the spec change"
		if p.podHash() == v.pod.Annotations[AnnotationPodSpecHash] && p.awaitsRemount(v.pod) {
			why = "mounting a grown volume again (FileSystemResizePending)"
		}
		return stepResult{
			drop:        v.pod,
			progressing: conditionTrue(ReasonRollingChange, fmt.Sprintf("%s: member %s gets a new Pod on its claim; %s", why, v.name, p.rolloutRemaining(views, st))),
			resync:      resyncWaiting,
		}
	}
	step := p.grow(views)
	if step.action != nil {
		step.action.Reason = fmt.Sprintf("rolling out the spec change: adding a learner on the new spec to replace member %s", v.name)
		step.action.Step = ReasonRollingChange
		step.progressing = conditionTrue(ReasonRollingChange, step.action.Reason+"; "+p.rolloutRemaining(views, st))
	}
	return step
}

func (p *planner) rolloutRemaining(views []memberView, st rolloutState) string {
	names := make([]string, len(st.pending))
	for i, v := range st.pending {
		names[i] = v.name
	}
	return fmt.Sprintf("%d of %d members on the new spec; still to roll: %s", len(views)-len(st.pending), len(views), strings.Join(names, ", "))
}

// rescueRollout: a member on a claim whose Pod is outdated and cannot run
// (the kubelet says so) gets a Pod on the current spec at once. It serves
// nothing as it is, so this costs no availability, and it is how setting a
// spec back rescues a member that a bad spec broke.
func (p *planner) rescueRollout(views []memberView) stepResult {
	for _, v := range views {
		if v.pod == nil || !v.persistent || v.ready || v.pod.DeletionTimestamp != nil || !p.outdated(v.pod) {
			continue
		}
		if why := podFailure(v.pod); why != "" {
			return stepResult{
				drop:        v.pod,
				progressing: conditionTrue(ReasonRollingChange, fmt.Sprintf("member %s, which cannot run (%s), gets a new Pod on the current spec", v.name, why)),
				resync:      resyncWaiting,
			}
		}
	}
	return stepResult{}
}

// outdatedVictim is the member a scale-down removes first: one whose Pod
// is outdated, so that the surplus member of an emptyDir rollout is the
// one it replaces. Never the leader: victim is nil when no outdated
// follower is left, and leaderOutdated says whether the leader still is.
func (p *planner) outdatedVictim(views []memberView, leaderID uint64) (victim *memberView, leaderOutdated bool) {
	for i := len(views) - 1; i >= 0; i-- {
		if !p.outdated(views[i].pod) {
			continue
		}
		if views[i].ID == leaderID {
			leaderOutdated = true
			continue
		}
		return &views[i], false
	}
	return nil, leaderOutdated
}

// unschedulable is the scheduler's word that no node takes the Pod, as a
// new nodeSelector or resources that no node has leave it.
func unschedulable(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return ""
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return strings.TrimSpace("Unschedulable: " + c.Message)
		}
	}
	return ""
}

// podFailureOf is podFailure for a Pod that may not exist.
func podFailureOf(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	return podFailure(pod)
}
