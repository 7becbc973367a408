package etcdcluster

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// Decision is the answer to one sync.
type Decision struct {
	Children []plan.Child
	Status   v1beta2.ClusterStatus
	// Action is the membership change to make before answering, if any.
	Action *membership.Action
	// ResyncAfter asks for another sync; zero leaves it to Metacontroller's
	// periodic resync and to child events.
	ResyncAfter time.Duration
	// Finalized is the finalize hook's answer.
	Finalized bool
}

// Outcome is what became of the action an earlier plan of this sync chose.
type Outcome struct {
	Action membership.Action
	Err    error
}

// reportOutcome describes the step this sync already took.
func (p *planner) reportOutcome(out Outcome) stepResult {
	if out.Err != nil && out.Action.Type == membership.ActionEnableDowngrade {
		// etcd's own validation said no: nothing changed, and the reason
		// is etcd's. The next sync asks again, in case it no longer holds.
		return blockedStep(ReasonDowngradeRefused, fmt.Sprintf("etcd refused the downgrade to %s, and nothing was changed: %v", out.Action.Version, out.Err))
	}
	if out.Err != nil {
		msg := fmt.Sprintf("%s failed: %v", out.Action, out.Err)
		return stepResult{progressing: conditionTrue(ReasonActionFailed, msg), resync: resyncTrouble}
	}
	msg := out.Action.Reason
	if out.Action.Name != "" {
		msg += " (" + out.Action.Name + ")"
	}
	return stepResult{progressing: conditionTrue(out.Action.Step, msg), resync: resyncAfterAction}
}

// How soon to look again. Child events (a Pod turning Ready) trigger syncs
// by themselves; these cover what produces no event, such as a learner
// catching up or etcd becoming reachable.
const (
	resyncAfterAction = 500 * time.Millisecond
	resyncWaiting     = 2 * time.Second
	resyncTrouble     = 5 * time.Second
)

// StartTimeout is how long a new member's Pod may take to start before the
// member is given up and removed: long enough for a slow image pull.
const StartTimeout = 5 * time.Minute

type planner struct {
	o *Observed
	// observed is the request as it came, before the planner took any
	// child out of o.
	observed *Observed
	spec     v1beta2.ClusterSpec
	// rec is the bootstrap record this sync writes; see bootstrap.go.
	rec *v1beta2.BootstrapStatus
	// serviceRec is the copy of the record the peer Service carries, as
	// decoded, and serviceRecRaw its annotation's text.
	serviceRec    *v1beta2.BootstrapStatus
	serviceRecRaw string
	// restoreStatus and newest are written to status.restore and
	// status.newestBackup; see restore.go.
	restoreStatus *v1beta2.ClusterRestoreStatus
	newest        *v1beta2.KnownBackup
	// holdEmptySeed keeps a cluster that waits for its data from being
	// seeded empty meanwhile.
	holdEmptySeed bool
	// volumes is what this sync does with the claims' size; see
	// volumes.go.
	volumes volumePlan
	// takeover is where the adoption of the CoreOS operator's members
	// stands, once worked out; see takeover.go.
	takeover *takeoverState
	// hash is podSpecHash of spec, once computed; see rollout.go.
	hash string
	// serving says, by member name, whether a member Pod carries
	// LabelServing; a member left out keeps what its Pod has. See
	// serving.go.
	serving map[string]bool
	// ownChildren is set once o's Pods and claims are the planner's own
	// copies; see editChildren.
	ownChildren bool
	// planned: the spec is valid, so the Secrets it asks for are rendered
	// even when the rest of the sync is frozen.
	planned bool
	// secretLabels are the labels of every Secret child, made once, and
	// bundles the client and peer trust bundles (autotlsleaves.go).
	secretLabels map[string]string
	bundles      [2][]byte
	// names are the cluster's TLS Secret names, once worked out (named).
	names v1beta2.TLSSecretNames
	named bool
	// certs is what this sync renders of spec.TLS.auto; nil without it,
	// or when the sync is frozen before it is planned.
	certs *certificates
	// leftAuto: the members moved from spec.TLS.auto's Secrets to
	// spec.TLS.static's, so the hook's are answered no more.
	leftAuto bool
	// hib is status.hibernation as a hibernation through a final backup
	// planned it this sync; see hibernatebackup.go.
	hib *v1beta2.HibernationStatus
	// firstSeed is SeedName of the cluster's first seed, once computed:
	// a plan asks for it several times, and it is a SHA-256.
	firstSeed string
}

// Plan decides one sync. See the package documentation for the protocol.
func Plan(observed *Observed) (d Decision) {
	// The planner may take children out of its view (see restore.go); the
	// caller's observation stays as it was, since it may plan again on it
	// (see editChildren).
	o := *observed
	p := &planner{o: &o, observed: observed, spec: o.Cluster.Spec.WithDefaults(), serving: map[string]bool{}}
	p.rec = p.bootstrapRecord()
	p.restoreStatus = p.carriedRestoreStatus()
	p.newest = p.newestBackup()
	// The GitOps conditions summarise the status as finally rendered
	// (restore.go edits it after status()): see health.go. A finalize
	// answer carries the last status over; kstatus reads Terminating.
	defer func() {
		if !o.Finalizing {
			p.withHealth(&d.Status)
			d.Children = append(d.Children, p.secretChildren()...)
			p.wakeForCertificates(&d)
		}
	}()
	switch {
	case o.Finalizing:
		return p.finalize()
	case len(o.SpecErrors) > 0:
		return p.frozen(ReasonInvalidSpec, "the spec is invalid, so the cluster is left as it is: "+o.SpecErrors.ToAggregate().Error())
	}
	p.planned = true
	if msg := p.tlsChangeRefused(); msg != "" {
		return p.frozen(ReasonTLSChangeRefused, msg+"; the cluster is left as it is")
	}
	if p.spec.TLS.IsAuto() || p.leavingAuto() {
		// Renewed in place even while paused: a certificate left to
		// expire would stop the cluster. A CA rotation waits, as every
		// rollout does.
		p.certs = p.planCertificates()
		switch {
		case p.certs.done:
			// Moved to spec.TLS.static: the hook's Secrets go.
			p.certs, p.leftAuto = nil, true
		case p.certs.problem != "":
			return p.frozen(p.certs.problem, p.certs.problemMessage+"; so the cluster is left as it is")
		case !p.certs.ready:
			return p.held(ReasonCertificatesIssuing, "issuing the cluster's certificates (spec.TLS.auto) before any member uses them")
		}
	}
	if problems := p.tlsSecretProblems(); len(problems) > 0 {
		return p.frozen(ReasonTLSSecretInvalid, strings.Join(problems, "; ")+"; so the cluster is left as it is")
	}
	switch {
	case p.spec.Paused:
		return p.frozen(ReasonPaused, "spec.paused is true: children and membership are left as they are")
	}
	if p.spec.Hibernated {
		// A restore asked for meanwhile waits for the members to be back.
		return p.hibernate()
	}
	if p.rec != nil && p.rec.Restore != nil {
		p.dropSuperseded()
	}
	if req := p.restoreRequested(); req != nil {
		return p.planRestore(req)
	}
	if st := p.adoption(); st.waiting != "" {
		return p.frozen(ReasonTakeoverWaiting, st.waiting+"; the cluster is left as it is until it is stable")
	}
	d = p.planCurrent()
	if rs := d.Status.Restore; rs != nil && rs.Phase == v1beta2.RestoreRestoring && (d.ResyncAfter == 0 || d.ResyncAfter > resyncWaiting) {
		// Completed is seen in the first sync after the cluster matches
		// its spec; a missed Pod event must not leave that to the
		// periodic resync.
		d.ResyncAfter = resyncWaiting
	}
	return d
}

// editChildren gives the planner its own copies of the observed Pods and
// claims before it changes which are in view (only a restore does): the
// caller's observation stays as it came, and a steady plan copies none.
func (p *planner) editChildren() {
	if !p.ownChildren {
		p.o.Pods, p.o.PVCs = maps.Clone(p.o.Pods), maps.Clone(p.o.PVCs)
		p.ownChildren = true
	}
}

// finalize lets Metacontroller delete every child. Membership is not
// touched: the whole cluster is going away.
func (p *planner) finalize() Decision {
	o := p.o
	remaining := len(o.Pods) + len(o.Services) + len(o.PVCs) + len(o.PDBs) + len(o.SecretChildren) + len(o.NetworkPolicies)
	st := o.Cluster.Status
	st.ObservedGeneration = o.Cluster.Generation
	st.Reason = fmt.Sprintf("deleting: %d children left", remaining)
	d := Decision{Children: []plan.Child{}, Status: st, Finalized: remaining == 0}
	if !d.Finalized {
		d.ResyncAfter = resyncWaiting
	}
	return d
}

// frozen keeps every observed child exactly as it was last applied and
// makes no membership change; status still reports what is observed.
func (p *planner) frozen(reason, message string) Decision {
	r := p.observe()
	r.reason = message
	r.progressing = conditionFalse(reason, message)
	if reason == ReasonVersionSkew {
		r.upgrading = conditionFalse(reason, message)
	}
	if reason == ReasonPaused {
		r.paused = true
	} else {
		r.problems = append([]problem{{reason, message}}, r.problems...)
	}
	return Decision{Children: p.keptChildren(), Status: p.status(r)}
}

// held keeps every child as frozen does, while the hook itself moves
// toward the spec: a step of its own, not a problem.
func (p *planner) held(reason, message string) Decision {
	r := p.observe()
	r.reason = message
	r.progressing = conditionTrue(reason, message)
	return Decision{Children: p.keptChildren(), Status: p.status(r), ResyncAfter: resyncWaiting}
}

// keptChildren are the observed Pods, Services, claims and budgets, each
// exactly as it was last applied.
func (p *planner) keptChildren() []plan.Child {
	o := p.o
	var children []plan.Child
	for _, pod := range o.Pods {
		children = append(children, plan.KeepPod(pod))
	}
	for _, s := range o.Services {
		children = append(children, plan.Keep(plan.KindService, s.Name, s.Annotations, func() any { return s }))
	}
	for _, c := range o.PVCs {
		children = append(children, plan.KeepClaim(c))
	}
	for _, b := range o.PDBs {
		children = append(children, plan.Keep(plan.KindPDB, b.Name, b.Annotations, func() any { return b }))
	}
	for _, n := range o.NetworkPolicies {
		children = append(children, plan.Keep(plan.KindNetworkPolicy, n.Name, n.Annotations, func() any { return n }))
	}
	plan.SortChildren(children)
	return children
}

// planCurrent plans the cluster the bootstrap record names.
func (p *planner) planCurrent() Decision {
	if p.o.Membership == nil {
		return p.withoutMembership()
	}
	return p.withMembership()
}

// ExcludedFromMembership names the Pods whose etcd must not be asked for
// the membership: the seed of a restore still being verified, which runs
// another etcd cluster than the one being reconciled, and the members of a
// cluster a restore replaced.
func ExcludedFromMembership(o *Observed) map[string]bool {
	if !restoreInView(o) {
		// The steady case, asked on every sync: no Pod of another etcd
		// cluster can be in view, and the record need not be gathered.
		return map[string]bool{}
	}
	p := &planner{o: o, spec: o.Cluster.Spec.WithDefaults()}
	p.rec = p.bootstrapRecord()
	out := map[string]bool{}
	first := SeedName(o.Cluster.Name, string(o.Cluster.UID))
	for name, pod := range o.Pods {
		_, restoring := pod.Annotations[AnnotationRestoreRequest]
		seed := pod.Annotations[AnnotationSeedMember]
		if seed == "" {
			seed = first
		}
		switch {
		case restoring && !restoredMember(p.rec, name):
			out[name] = true
		case p.rec != nil && p.rec.Restore != nil && seed != p.rec.SeedMember:
			out[name] = true
		}
	}
	return out
}

// restoreInView: a Pod is a restore's seed, or the record, in the status
// or on the peer Service, names a restore. Only then can a Pod in view
// belong to another etcd cluster than the one reconciled.
func restoreInView(o *Observed) bool {
	if b := o.Cluster.Status.Bootstrap; b != nil && b.Restore != nil {
		return true
	}
	if s := o.Services[o.Cluster.Name]; s != nil && strings.Contains(s.Annotations[AnnotationBootstrap], `"restore"`) {
		return true
	}
	for _, pod := range o.Pods {
		if _, ok := pod.Annotations[AnnotationRestoreRequest]; ok {
			return true
		}
	}
	return false
}
