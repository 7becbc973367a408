package etcdcluster

import (
	"fmt"
	"sort"
	"time"

	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
	corev1 "k8s.io/api/core/v1"
)

// memberView joins one etcd member with its children.
type memberView struct {
	membership.Member
	name  string
	pod   *corev1.Pod
	claim *corev1.PersistentVolumeClaim
	// persistent: the member's data lives on its claim, so losing the Pod
	// loses nothing.
	persistent bool
	ready      bool
	// dead: the member's data is gone, or its Pod will never run. Such a
	// member is removed and replaced, never restarted.
	dead       bool
	deadReason string
}

// viewMembers classifies every member, sorted by name so that every choice
// made over them is deterministic.
func (p *planner) viewMembers() []memberView {
	o := p.o
	views := make([]memberView, 0, len(o.Membership.Members))
	for _, m := range o.Membership.Members {
		v := memberView{Member: m, name: membership.MemberName(m, o.Cluster.Name)}
		v.pod = o.Pods[v.name]
		if claim := o.PVCs[v.name]; claim != nil && claim.DeletionTimestamp == nil {
			v.claim = claim
		}
		switch {
		case v.pod != nil:
			v.persistent = podUsesClaim(v.pod)
		case v.claim != nil:
			v.persistent = true
		default:
			v.persistent = !m.Started() && p.spec.Persistent()
		}
		v.ready = podReady(v.pod)
		v.dead, v.deadReason = p.deadness(v)
		views = append(views, v)
	}
	sort.Slice(views, func(i, j int) bool { return views[i].name < views[j].name })
	return views
}

func (p *planner) deadness(v memberView) (bool, string) {
	switch {
	case !v.Started() && v.pod != nil && podFinished(v.pod):
		return true, "its Pod ended before the member ever started"
	case !v.Started() && v.pod != nil && !v.ready && podAge(p.o.Now, v.pod.CreationTimestamp.Time) > StartTimeout:
		return true, "its Pod did not start within " + StartTimeout.String()
	case !v.Started():
		return false, ""
	case v.persistent:
		// Its data survives on the claim; a lost or ended Pod is replaced
		// in place and the member rejoins with its identity.
		return false, ""
	case v.pod == nil:
		return true, "its Pod is gone and its data was on an emptyDir"
	case podFinished(v.pod):
		return true, "its Pod is " + string(v.pod.Status.Phase) + " and its data was on an emptyDir"
	case v.pod.Status.Phase != corev1.PodRunning && !v.Reachable && notReadyFor(v.pod, p.o.Now) > DeadTimeout:
		// A Pod stuck outside Running (its node lost, say) for this long is
		// not coming back soon, and its emptyDir will not come back at all.
		return true, fmt.Sprintf("its Pod has not been running for over %s and its data is on an emptyDir", DeadTimeout)
	}
	return false, ""
}

// DeadTimeout is how long a member's Pod may stay out of Running before the
// member is declared dead and replaced. It is longer than a node reboot.
const DeadTimeout = 5 * time.Minute

// notReadyFor is how long the Pod's Ready condition has been false.
func notReadyFor(pod *corev1.Pod, now time.Time) time.Duration {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return now.Sub(c.LastTransitionTime.Time)
		}
	}
	return 0
}

// memberChildren renders the Pods and claims of the current members, and
// drops those of anything that is not a member. The latter is safe only on
// a linearizable membership read, which is why a stale read keeps them.
func (p *planner) memberChildren(views []memberView) []plan.Child {
	o, c := p.o, p.o.Cluster
	ms := o.Membership
	var children []plan.Child
	isMember := make(map[string]bool, len(views))
	for _, v := range views {
		isMember[v.name] = true
		switch {
		case v.pod != nil && v.persistent && podFinished(v.pod) && v.pod.DeletionTimestamp == nil:
			// Drop the ended Pod; the next sync recreates it on the claim.
		case v.pod != nil && v.pod.DeletionTimestamp == nil:
			children = append(children, p.currentPod(v.pod))
		case v.pod != nil:
			children = append(children, plan.KeepPod(v.pod))
		case !v.Started() || (v.persistent && v.claim != nil):
			// Always "existing": etcd answered, so the cluster exists, and a
			// member that restarts on its claim ignores the flag anyway.
			children = append(children, plan.Child{Kind: plan.KindPod, Name: v.name, Object: p.memberPod(v.name, initialCluster(ms, c.Name), "existing")})
		}
		if v.persistent {
			if v.claim != nil {
				children = append(children, p.claimChild(v.claim))
			} else if !v.Started() {
				children = append(children, plan.Child{Kind: plan.KindPVC, Name: v.name, Object: memberClaim(c, p.newClaimSpec(), v.name, p.seed())})
			}
		}
	}
	if ms.Stale {
		for name, pod := range o.Pods {
			if !isMember[name] {
				children = append(children, plan.KeepPod(pod))
			}
		}
		for name, claim := range o.PVCs {
			if !isMember[name] {
				children = append(children, plan.KeepClaim(claim))
			}
		}
	}
	return children
}

// nameTaken: a Pod, a claim or a member has the name already.
func (p *planner) nameTaken(name string, views []memberView) bool {
	if _, ok := p.o.Pods[name]; ok {
		return true
	}
	if _, ok := p.o.PVCs[name]; ok {
		return true
	}
	for _, v := range views {
		if v.name == name {
			return true
		}
	}
	return false
}

// learnersSupported needs both the target version and every running
// member to know learners: the request goes to a running member.
func (p *planner) learnersSupported() bool {
	target, ok := parseVersion(p.spec.Version)
	if !ok || !target.supportsLearners() {
		return false
	}
	running, ok := parseVersion(p.lowestVersion())
	return ok && running.supportsLearners()
}
