package etcdcluster

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// withoutMembership plans a sync in which etcd's membership could not be
// read. Nothing may be removed, since nothing can be proven not to be a
// member: every Pod and claim is kept (a Pod the kubelet cannot run on
// another image than the target's gets the target's: see rescuable), and
// members whose Pod is gone but whose data is on a claim get their Pod
// back, which is how a cluster whose Pods all died comes back with its data.
//
// A cluster with no Pod and no claim left is bootstrapped only if it never
// ran (see bootstrap.go); one that ran has lost every member, and says so.
func (p *planner) withoutMembership() Decision {
	o := p.o
	lost := p.survivors() == 0 && p.rec != nil && p.rec.Bootstrapped
	recreate := lost && p.recreateRequested()
	fresh := len(o.Pods) == 0 && len(o.PVCs) == 0 && !lost
	// A cluster born from a backup never starts empty: while its restore
	// is verified, refused or failed, it waits.
	uncommitted := p.rec == nil || p.rec.Restore == nil
	waitForData := fresh && (p.holdEmptySeed || (uncommitted && (p.spec.Restore != nil || p.o.RestoreRequest != nil)))
	lostSeed := ""
	switch {
	case recreate:
		lostSeed = p.rec.SeedMember
		p.rec = p.newRecord(v1beta2.BootstrapStatus{SeedMember: p.recreatedSeed(lostSeed), RecreatedFrom: lostSeed})
	case fresh && p.rec == nil:
		// Also while waiting for a restore: the peer Service then carries
		// a record, and is never taken for one an earlier hook version
		// rendered (see earlierVersionEvidence).
		p.rec = p.newRecord(v1beta2.BootstrapStatus{SeedMember: p.seed()})
	}

	children := p.commonChildren()
	for _, pod := range o.Pods {
		if p.rescuable(pod) {
			children = append(children, p.reimagedPod(pod))
		} else {
			children = append(children, plan.KeepPod(pod))
		}
	}
	recovered := 0
	for name, claim := range o.PVCs {
		children = append(children, plan.KeepClaim(claim))
		if _, hasPod := o.Pods[name]; !hasPod && claim.DeletionTimestamp == nil {
			children = append(children, plan.Child{Kind: plan.KindPod, Name: name, Object: p.recoveredPod(name)})
			recovered++
		}
	}

	children = append(children, p.restoredMembersMissing()...)

	r := p.observe()
	d := Decision{ResyncAfter: resyncTrouble}
	switch {
	case recreate:
		children = p.seedChildren(children)
		p.seeding(&r, fmt.Sprintf("starting the seed member %s of a new, empty cluster: the %s annotation accepted the loss of the cluster seeded by %s",
			p.seed(), v1beta2.AnnotationRecreateEmpty, lostSeed))
		d.ResyncAfter = resyncWaiting
	case lost && len(o.Pods)+len(o.PVCs)+len(o.Services)+len(o.PDBs) == 0:
		p.nothingObserved(&r)
	case lost:
		p.allMembersLost(&r)
	case waitForData:
		r.phase, r.size, r.ready, r.unready = v1beta2.PhaseCreating, 0, nil, nil
		r.progressing = conditionFalse(ReasonRestoring, "the cluster starts from a backup and waits for a usable one; no empty member is started")
	case fresh:
		children = p.seedChildren(children)
		p.seeding(&r, "starting the seed member "+p.seed())
		d.ResyncAfter = resyncWaiting
	case recovered > 0:
		r.progressing = conditionTrue(ReasonRecoveringMembers, "recreating the Pods of members whose data is on a PVC")
		d.ResyncAfter = resyncWaiting
	case r.phase == v1beta2.PhaseCreating:
		r.progressing = conditionTrue(ReasonBootstrapping, r.available.message)
		d.ResyncAfter = resyncWaiting
	}
	plan.SortChildren(children)
	d.Children = children
	d.Status = p.status(r)
	return d
}

// survivors counts what could still bring a member back with its data: a
// Pod that has not ended or keeps its data on a claim, and a claim that is
// not being deleted.
func (p *planner) survivors() int {
	n := 0
	for _, pod := range p.o.Pods {
		if !podFinished(pod) || podUsesClaim(pod) {
			n++
		}
	}
	for _, claim := range p.o.PVCs {
		if claim.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// restoredMembersMissing renders the members a committed restore starts,
// the seed among them, whose Pods are missing, until they have formed a
// cluster (the record's Formed): they restore in parallel, and wait for
// each other. Once formed, a member whose Pod is gone may have
// acknowledged writes it no longer holds, so it is a dead member, as any,
// and never restored again under its name. With no Pod or claim left at
// all, nothing is rendered: the cluster is reported lost instead.
func (p *planner) restoredMembersMissing() []plan.Child {
	rec := p.rec
	if rec == nil || rec.Restore == nil || len(rec.Restore.Members) < 2 || rec.Formed || rec.ClusterID != "" || p.survivors() == 0 {
		return nil
	}
	var children []plan.Child
	for _, name := range rec.Restore.Members {
		if _, ok := p.o.Pods[name]; ok {
			continue
		}
		if _, ok := p.o.PVCs[name]; ok {
			// Its Pod comes back with the claims' (recoveredPod).
			continue
		}
		children = append(children, plan.Child{Kind: plan.KindPod, Name: name, Object: p.memberPod(name, "", "new")})
		if p.spec.Persistent() {
			children = append(children, plan.Child{Kind: plan.KindPVC, Name: name, Object: memberClaim(p.o.Cluster, p.spec, name, rec.SeedMember)})
		}
	}
	return children
}

// seedChildren adds the seed of the recorded cluster: a one-member cluster
// (--initial-cluster-state=new), with its claim on a persistent cluster.
func (p *planner) seedChildren(children []plan.Child) []plan.Child {
	c := p.o.Cluster
	seed := p.seed()
	// The seed is the whole cluster: there is nothing for it to catch up
	// with.
	p.serving[seed] = true
	children = append(children, plan.Child{Kind: plan.KindPod, Name: seed, Object: p.memberPod(seed,
		seed+"="+p.addresses().PeerURL(seed), "new")})
	if p.spec.Persistent() {
		children = append(children, plan.Child{Kind: plan.KindPVC, Name: seed, Object: memberClaim(c, p.spec, seed, seed)})
	}
	return children
}

func (p *planner) seeding(r *observation, message string) {
	r.phase = v1beta2.PhaseCreating
	r.size = 0
	r.unready = []string{p.seed()}
	r.progressing = conditionTrue(ReasonBootstrapping, message)
}

// allMembersLost reports a cluster that ran and has no member left that
// could come back: every Pod is gone or ended with its emptyDir, and no
// claim survives. Its data is gone; a new, empty cluster under the same
// name would hide that from every client, so none is started.
func (p *planner) allMembersLost(r *observation) {
	c, rec := p.o.Cluster, p.rec
	cluster := "the etcd cluster seeded by " + rec.SeedMember
	if rec.ClusterID != "" {
		cluster = fmt.Sprintf("etcd cluster %s (seeded by %s)", rec.ClusterID, rec.SeedMember)
	}
	where := "their data was on emptyDir volumes"
	if p.spec.Persistent() {
		where = "no member's PVC is left"
	}
	restore := "Restore it from a backup (no backup of it is known: no EtcdBackup names it in spec.clusterName)"
	if b := p.newest; b != nil {
		restore = fmt.Sprintf("The newest backup known is %s (EtcdBackup %s), at revision %d, taken %s (%s ago); restoring it loses the writes after it. "+
			"Restore it with an EtcdRestore named %s whose spec.backup.name is %s (see the disaster-recovery runbook in docs/backup-restore.md)",
			b.Location, b.EtcdBackup, b.Revision, b.Time.UTC().Format("2006-01-02T15:04:05Z"), roughAge(p.o.Now.Sub(b.Time.Time)), c.Name, b.EtcdBackup)
	}
	msg := fmt.Sprintf("every member of %s is lost and %s, so its data is gone. No new, empty cluster is started under this name. "+
		"%s, or, to start an empty cluster on purpose: kubectl annotate etcdcluster -n %s %s %s=%s",
		cluster, where, restore, c.Namespace, c.Name, v1beta2.AnnotationRecreateEmpty, rec.SeedMember)
	if v, ok := c.Annotations[v1beta2.AnnotationRecreateEmpty]; ok {
		msg += fmt.Sprintf(" (the annotation there now, %q, names another cluster and is ignored)", v)
	}
	r.phase = v1beta2.PhaseFailed
	r.size = 0
	r.ready, r.unready = nil, nil
	r.available = conditionFalse(ReasonAllMembersLost, msg)
	r.problems = []problem{{ReasonAllMembersLost, msg}}
	r.reason = msg
	r.progressing = conditionFalse(ReasonAllMembersLost, "nothing can be reconciled until the cluster is restored or re-created")
}

// nothingObserved reports a request that shows no child at all, not even
// the Services, which losing every member leaves in place: most likely an
// informer cache that has not caught up (Metacontroller restarting, say).
// Nothing is started, as for a loss, but nothing is declared lost either;
// if the Services are really gone, the answer recreates them and the next
// sync says AllMembersLost.
func (p *planner) nothingObserved(r *observation) {
	prev := p.o.Cluster.Status
	msg := "the request shows no child of this cluster at all, not even its Services: waiting for Metacontroller's view before judging; no member is started meanwhile"
	r.phase = prev.Phase
	r.size, r.ready, r.unready = prev.Size, prev.Members.Ready, prev.Members.Unready
	r.available = condition{metav1.ConditionUnknown, ReasonChildrenNotObserved, msg}
	r.problems = []problem{{ReasonChildrenNotObserved, msg}}
	r.progressing = conditionFalse(ReasonChildrenNotObserved, msg)
}

// recoveredPod renders the Pod of a member that has data on its claim.
// etcd ignores the bootstrap flags on a data dir that already has a WAL,
// so the membership they name need not be known. Only the seed of a
// cluster that never ran starts as "new": its claim cannot hold data yet.
func (p *planner) recoveredPod(name string) any {
	state := "existing"
	if name == p.seed() && (p.rec == nil || !p.rec.Bootstrapped) {
		state = "new"
	}
	var parts []string
	for other := range p.o.PVCs {
		parts = append(parts, other+"="+p.addresses().PeerURL(other))
	}
	cluster := strings.Join(sorted(parts), ",")
	return p.memberPod(name, cluster, state)
}

// commonChildren are rendered whatever the membership: the two Services,
// the disruption budget and the fence (networkpolicy.go).
func (p *planner) commonChildren() []plan.Child {
	c := p.o.Cluster
	// Room for the member Pods the caller appends.
	out := make([]plan.Child, 0, 4+len(p.o.Pods))
	out = append(out,
		plan.Child{Kind: plan.KindService, Name: c.Name, Object: peerService(c, p.rec, p.recordText())},
		plan.Child{Kind: plan.KindService, Name: plan.ClientServiceName(c.Name), Object: clientService(c, p.selectServingOnly())},
		plan.Child{Kind: plan.KindPDB, Name: c.Name, Object: disruptionBudget(c, p.spec)},
	)
	if np := networkPolicy(c, p.spec); np != nil {
		out = append(out, plan.Child{Kind: plan.KindNetworkPolicy, Name: c.Name, Object: np})
	}
	return out
}

func podAge(now time.Time, created time.Time) time.Duration {
	if created.IsZero() {
		return 0
	}
	return now.Sub(created)
}
