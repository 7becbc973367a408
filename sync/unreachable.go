package sync

import (
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// withoutMembership plans a sync in which etcd's membership could not be
// read. Nothing may be removed, since nothing can be proven not to be a
// member: every Pod and claim is kept (a Pod the kubelet cannot run on
// another image than the target's gets the target's: see rescuable), and
// members whose Pod is gone but whose data is on a claim get their Pod
// back, which is how a cluster whose Pods all died comes back with its data.
func (p *planner) withoutMembership() Decision {
	o, c := p.o, p.o.Cluster
	children := p.commonChildren()
	live := 0
	for _, pod := range o.Pods {
		if p.rescuable(pod) {
			children = append(children, p.reimagedPod(pod))
		} else {
			children = append(children, keepPod(pod))
		}
		live++
	}
	recovered := 0
	for name, claim := range o.PVCs {
		children = append(children, keep(KindPVC, name, claim.Annotations, func() any { return claim }))
		if _, hasPod := o.Pods[name]; hasPod || claim.DeletionTimestamp != nil {
			continue
		}
		children = append(children, Child{Kind: KindPod, Name: name, Object: p.recoveredPod(name)})
		recovered++
	}

	r := p.observe()
	d := Decision{ResyncAfter: resyncTrouble}
	switch {
	case live == 0 && len(o.PVCs) == 0 && everHadMembers(c):
		// Every member and its data is gone. Bootstrapping a fresh, empty
		// cluster under the same name would hide that loss from clients.
		r.phase = v1beta2.PhaseFailed
		r.available = conditionFalse(ReasonAllMembersLost, "every member Pod is gone and no member kept its data on a PVC; restore from a backup, or delete and recreate the EtcdCluster to start empty")
		r.problems = append([]problem{{ReasonAllMembersLost, r.available.message}}, r.problems...)
		r.progressing = conditionFalse(ReasonAllMembersLost, "nothing left to reconcile")
	case live == 0 && len(o.PVCs) == 0:
		seed := SeedName(c.Name, string(c.UID))
		children = append(children, Child{Kind: KindPod, Name: seed, Object: renderMemberPod(memberPodInput{
			cluster: c, spec: p.spec, name: seed,
			initialCluster: seed + "=" + PeerURL(seed, c.Name, c.Namespace, p.spec.Pod.ClusterDomainSuffix()),
			state:          "new",
		})})
		if p.spec.Persistent() {
			children = append(children, Child{Kind: KindPVC, Name: seed, Object: memberClaim(c, p.spec, seed)})
		}
		r.phase = v1beta2.PhaseCreating
		r.size = 0
		r.unready = []string{seed}
		r.progressing = conditionTrue(ReasonBootstrapping, "starting the seed member "+seed)
		d.ResyncAfter = resyncWaiting
	case recovered > 0:
		r.progressing = conditionTrue(ReasonRecoveringMembers, "recreating the Pods of members whose data is on a PVC")
		d.ResyncAfter = resyncWaiting
	case r.phase == v1beta2.PhaseCreating:
		r.progressing = conditionTrue(ReasonBootstrapping, r.available.message)
		d.ResyncAfter = resyncWaiting
	}
	sortChildren(children)
	d.Children = children
	d.Status = p.status(r)
	return d
}

// everHadMembers reads the previous status: once the hook has reported a
// running cluster, an empty observation means loss, not a fresh start.
func everHadMembers(c *v1beta2.EtcdCluster) bool {
	st := c.Status
	return st.Phase == v1beta2.PhaseRunning || (st.Phase == v1beta2.PhaseFailed && st.Size > 0)
}

// recoveredPod renders the Pod of a member that has data on its claim.
// etcd ignores the bootstrap flags on a data dir that already has a WAL,
// so the membership they name need not be known.
func (p *planner) recoveredPod(name string) any {
	c := p.o.Cluster
	domain := p.spec.Pod.ClusterDomainSuffix()
	state := "existing"
	if name == SeedName(c.Name, string(c.UID)) {
		state = "new"
	}
	var parts []string
	for other := range p.o.PVCs {
		parts = append(parts, other+"="+PeerURL(other, c.Name, c.Namespace, domain))
	}
	cluster := strings.Join(sorted(parts), ",")
	return renderMemberPod(memberPodInput{cluster: c, spec: p.spec, name: name, initialCluster: cluster, state: state})
}

// commonChildren are rendered whatever the membership: the two Services
// and the disruption budget.
func (p *planner) commonChildren() []Child {
	c := p.o.Cluster
	return []Child{
		{Kind: KindService, Name: c.Name, Object: peerService(c)},
		{Kind: KindService, Name: ClientServiceName(c.Name), Object: clientService(c)},
		{Kind: KindPDB, Name: c.Name, Object: disruptionBudget(c, p.spec)},
	}
}

func podAge(now time.Time, created time.Time) time.Duration {
	if created.IsZero() {
		return 0
	}
	return now.Sub(created)
}
