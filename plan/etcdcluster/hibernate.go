package etcdcluster

import (
	"slices"
	"sort"
	"strings"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// spec.hibernated: the member Pods go, and the claims, the Services and
// the status stay. The same members come back on the same claims when it
// is set back, through the path that brings back a cluster whose Pods
// were all deleted at once (withoutMembership).
const (
	// ReasonHibernating: member Pods are being stopped.
	ReasonHibernating = "Hibernating"
	// ReasonHibernated: no member Pod is left.
	ReasonHibernated = "Hibernated"
	// ReasonHibernationRefused: the members' data would go with their
	// Pods.
	ReasonHibernationRefused = "HibernationRefused"
	// ReasonWaking: spec.hibernated is false again, and the members are
	// coming back.
	ReasonWaking = "Waking"
)

// hibernate plans one sync of a cluster asked to hibernate.
//
// Followers go first, one at a time and the newest name first, while the
// Pods left would still hold a quorum without the next; the last quorum
// goes together, the leader among it, so that no member runs on without a
// quorum behind it and no election happens on the way down. A Pod whose
// deletion is under way counts as running until it is gone.
//
// On an emptyDir, the Pods go only once a final backup holds their data
// (hibernatebackup.go).
func (p *planner) hibernate() Decision {
	if !p.spec.Persistent() {
		if d, done := p.hibernateThroughBackup(); !done {
			return d
		}
	}
	if len(p.o.Pods) == 0 {
		return p.hibernated()
	}
	stopping, waiting := p.hibernationVictims()
	children := p.commonChildren()
	for name, pod := range p.o.Pods {
		if !stopping[name] {
			children = append(children, plan.KeepPod(pod))
		}
	}
	children = p.withClaims(children)
	plan.SortChildren(children)
	r := p.observe()
	msg := "spec.hibernated: stopping " + strings.Join(sorted(keysOf(stopping)), ", ")
	if len(stopping) == 0 {
		msg = "spec.hibernated: waiting for " + strings.Join(waiting, ", ") + " to stop"
	}
	r.reason, r.progressing = msg, conditionTrue(ReasonHibernating, msg)
	r.problems = withoutReasons(r.problems, ReasonMembersUnready, ReasonEtcdUnreachable, ReasonQuorumLost)
	return Decision{Children: children, Status: p.status(r), ResyncAfter: resyncWaiting}
}

// hibernationVictims are the member Pods this sync stops, and the names of
// those already stopping.
func (p *planner) hibernationVictims() (stopping map[string]bool, waiting []string) {
	var running []string
	for name, pod := range p.o.Pods {
		if pod.DeletionTimestamp != nil {
			waiting = append(waiting, name)
			continue
		}
		running = append(running, name)
	}
	sort.Strings(waiting)
	stopping = map[string]bool{}
	if len(waiting) > 0 {
		// One at a time: the next goes once this one is gone.
		return stopping, waiting
	}
	members := len(p.o.Pods)
	var leader string
	if ms := p.o.Membership; ms != nil {
		members = max(members, len(ms.Voters()))
		for _, m := range ms.Members {
			if m.ID == ms.LeaderID {
				leader = membership.MemberName(m, p.o.Cluster.Name)
			}
		}
	}
	if len(running) <= membership.Quorum(members) {
		for _, name := range running {
			stopping[name] = true
		}
		return stopping, nil
	}
	// Newest name first, never the leader while another can go.
	sort.Sort(sort.Reverse(sort.StringSlice(running)))
	for _, name := range running {
		if name != leader {
			stopping[name] = true
			return stopping, nil
		}
	}
	stopping[running[0]] = true
	return stopping, nil
}

// hibernated is the answer once no member Pod is left: the claims, the
// Services and the rest, and a status that says so. A hibernated cluster
// is Ready (kstatus Current) and not Available.
func (p *planner) hibernated() Decision {
	children := p.withClaims(p.commonChildren())
	plan.SortChildren(children)
	msg := p.hibernatedMessage()
	r := observation{
		phase:       v1beta2.PhaseHibernated,
		reason:      msg,
		available:   conditionFalse(ReasonHibernated, msg),
		progressing: conditionFalse(ReasonHibernated, msg),
		upgrading:   conditionFalse(ReasonHibernated, msg),
		version:     p.o.Cluster.Status.CurrentVersion,
	}
	return Decision{Children: children, Status: p.status(r)}
}

// hibernatedHealth: a cluster hibernated on purpose is Current for
// kstatus, as a paused one that serves is.
func hibernatedHealth(msg string) healthConditions {
	return healthConditions{ready: conditionTrue(ReasonHibernated, msg), reconciling: conditionFalse(ReasonHibernated, msg), stalled: conditionFalse(ReasonHibernated, msg)}
}

// withClaims adds every observed claim, as it was last applied: the
// members' data waits on them.
func (p *planner) withClaims(children []plan.Child) []plan.Child {
	for _, claim := range p.o.PVCs {
		children = append(children, plan.KeepClaim(claim))
	}
	return children
}

// withoutReasons drops the problems a hibernation explains.
func withoutReasons(problems []problem, reasons ...string) []problem {
	return slices.DeleteFunc(problems, func(pr problem) bool { return slices.Contains(reasons, pr.reason) })
}
