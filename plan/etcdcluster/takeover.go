package etcdcluster

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// Taking over a cluster the CoreOS etcd-operator ran.
//
// The CoreOS operator (v0.9.x) left, for each EtcdCluster, member Pods
// named <cluster>-<10 random characters> (labels app=etcd, etcd_cluster,
// etcd_node; a check-dns init container; restartPolicy Never; an etcd.version
// annotation), the <cluster> and <cluster>-client Services, and with
// pod.persistentVolumeClaimSpec a claim per member named after it. Their
// names, labels, data directory and URLs are the ones this hook renders, so
// the members are adopted as they are: their Pods are kept (given this
// hook's labels and pod-spec hash in place, so no restart), the Services
// take this hook's spec in place, and no membership change is made.
//
// An adopted member keeps the CoreOS Pod until the user asks for the move:
// any change of spec.pod or spec.etcd, or AnnotationRollout, rolls the
// members through the quorum-safe rollout (rollout.go), one at a time.
// A takeover itself never restarts a member.
//
// A cluster the CoreOS operator left in the middle of an upgrade (member
// Pods on different releases) or of a scale (a member of etcd without a
// Pod, a Pod that is not a member, a member added but not started) is not
// taken over until it is stable: the hook changes nothing and says why
// (TakeoverWaiting), as the steps it would take could fight what the CoreOS
// operator began.

// Reasons of ConditionAdopted.
const (
	ReasonAdoptedFromCoreOS = "AdoptedFromCoreOS"
	ReasonTakeoverWaiting   = "TakeoverWaiting"
)

// AnnotationRollout on an EtcdCluster: a change of its value rolls every
// member onto a new Pod of the current spec, through the rollout, as a
// change of spec.pod would (kubectl rollout restart, for etcd members).
const AnnotationRollout = v1beta2.Group + "/rollout"

// coreosCheckDNS is the init container the CoreOS operator gives every
// member Pod; this hook renders none of that name.
const coreosCheckDNS = "check-dns"

// coreosPod: the Pod was made by the CoreOS etcd-operator.
func coreosPod(pod *corev1.Pod) bool {
	if pod == nil || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		return false
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == coreosCheckDNS {
			return true
		}
	}
	return false
}

// takeoverState is where the adoption of the CoreOS operator's members
// stands.
type takeoverState struct {
	// members run on Pods the CoreOS operator made, by name.
	members []string
	// pending: some of them are not adopted yet (no pod-spec hash).
	pending bool
	// waiting says why the cluster is not taken over yet.
	waiting string
}

// adoption is the takeover state, worked out once per plan.
func (p *planner) adoption() takeoverState {
	if p.takeover == nil {
		st := p.takeoverOf()
		p.takeover = &st
	}
	return *p.takeover
}

func (p *planner) takeoverOf() takeoverState {
	var st takeoverState
	images := map[string][]string{}
	for name, pod := range p.o.Pods {
		if !coreosPod(pod) {
			continue
		}
		st.members = append(st.members, name)
		if pod.Annotations[AnnotationPodSpecHash] == "" {
			st.pending = true
		}
		img := containerImage(pod)
		images[img] = append(images[img], name)
	}
	slices.Sort(st.members)
	if !st.pending {
		return st
	}
	if len(images) > 1 {
		var runs []string
		for img, names := range images {
			slices.Sort(names)
			runs = append(runs, fmt.Sprintf("%s on %s", strings.Join(names, ", "), img))
		}
		slices.Sort(runs)
		st.waiting = "the CoreOS etcd-operator left an upgrade under way (" + strings.Join(runs, "; ") + ")"
		return st
	}
	if ms := p.o.Membership; ms != nil {
		var why []string
		isMember := map[string]bool{}
		for _, m := range ms.Members {
			name := membership.MemberName(m, p.o.Cluster.Name)
			isMember[name] = true
			switch {
			case !m.Started():
				why = append(why, fmt.Sprintf("member %s was added but never started", name))
			case m.IsLearner:
				why = append(why, fmt.Sprintf("member %s is a learner", name))
			case p.o.Pods[name] == nil:
				why = append(why, fmt.Sprintf("member %s has no Pod", name))
			}
		}
		for _, name := range st.members {
			if !isMember[name] {
				why = append(why, fmt.Sprintf("Pod %s is not a member of etcd", name))
			}
		}
		if len(why) > 0 {
			slices.Sort(why)
			st.waiting = "the CoreOS etcd-operator left a scale under way: " + strings.Join(why, "; ")
		}
	}
	return st
}

// adoptedCondition is ConditionAdopted, when any member runs on a CoreOS
// operator's Pod.
func (p *planner) adoptedCondition(st takeoverState) (condition, bool) {
	switch {
	case len(st.members) == 0:
		return condition{}, false
	case st.waiting != "":
		return conditionFalse(ReasonTakeoverWaiting, st.waiting+"; the hook changes nothing until it is stable"), true
	}
	return conditionTrue(ReasonAdoptedFromCoreOS, fmt.Sprintf(
		"members %s run on the Pods the CoreOS etcd-operator made, as they are; they move to this hook's Pods one at a time with the next change of spec.pod or spec.etcd, or of the annotation %s",
		strings.Join(st.members, ", "), AnnotationRollout)), true
}
