package etcdcluster

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// A restore replaces the etcd cluster behind an EtcdCluster with one
// seeded from a snapshot, keeping the EtcdCluster object, its UID and its
// Services. Like a recreate-empty (see bootstrap.go) it starts a new seed
// member with a name derived from the request, and records the new cluster
// in the bootstrap record; unlike it, the seed's init containers fetch,
// verify and restore the snapshot before etcd first starts.
//
// The order is what keeps a bad backup from costing a running cluster:
//  1. Verifying: the seed Pod of the restored cluster is rendered beside
//     the running members, which the planner goes on reconciling as if it
//     were not there. Its first init container fetches the snapshot and
//     checks its sha256 and etcd's trailer.
//  2. The fetch succeeded: the request is committed to the bootstrap
//     record, and from then on the Pods and claims of the old cluster are
//     no longer rendered, so Metacontroller deletes them. The seed restores
//     the snapshot (with etcd's own tool); the other members of the
//     restored cluster are rendered beside it and restore the same state
//     from the store, and they start together (restoreMembers).
//  3. The fetch failed for good (the object is missing, corrupt, or from a
//     newer etcd): the seed Pod is dropped, the request is marked Failed in
//     status and never retried, and the old cluster never noticed.
//
// Every request has an ID, and one that the bootstrap record or the
// status names as done or failed is never carried out again, whatever the
// hook remembers: it remembers nothing.
const (
	// AnnotationRestoreRequest on a restored cluster's seed Pod names the
	// request it restores.
	AnnotationRestoreRequest = v1beta2.Group + "/restore-request"

	ReasonRestoring     = "Restoring"
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonRestoreRefused: an EtcdRestore or spec.restore that is invalid,
	// names what does not exist, or was carried out already.
	ReasonRestoreRefused = "RestoreRefused"
)

// restoreRequest is one request to seed the cluster from a backup.

func (p *planner) planRestore(req *restoreRequest) Decision {
	seed := p.restoreSeedName(req.id)
	// On a cluster restored before, dropSuperseded took every Pod of
	// another etcd cluster than the recorded one out of view: this
	// request's seed among them, which belongs to the cluster the request
	// is making. Without it the fetch is never seen verified, and the
	// request never committed.
	p.editChildren()
	if pod, ok := p.observed.Pods[seed]; ok {
		p.o.Pods[seed] = pod
	}
	if claim, ok := p.observed.PVCs[seed]; ok {
		p.o.PVCs[seed] = claim
	}
	pod := p.o.Pods[seed]
	fetch := observeFetch(pod)
	status := &v1beta2.ClusterRestoreStatus{Request: req.id, Origin: req.origin, Location: req.source.Location()}
	if req.backup != nil {
		status.Revision, status.EtcdVersion = req.backup.Revision, req.backup.EtcdVersion
		t := req.backup.Time
		status.BackupTime = &t
	}
	// What the seed fetched wins over what the request resolves to now: an
	// EtcdBackup may have taken a newer backup since the seed started.
	if fetch.result.Revision != 0 {
		status.Revision = fetch.result.Revision
	}
	// (A chain's fetch names its source with the target: the location
	// stays the request's.)
	if strings.HasPrefix(fetch.result.Source, "s3://") && req.source.Chain == nil {
		status.Location = fetch.result.Source
	}
	if fetch.result.EtcdVersion != "" {
		status.EtcdVersion = fetch.result.EtcdVersion
	}

	switch {
	case req.refused != "":
		status.Phase, status.Message = v1beta2.RestoreRefused, req.refused
		d := p.planWithout(seed)
		p.restoreProblem(&d, ReasonRestoreRefused, fmt.Sprintf("%s is not carried out: %s", req.origin, req.refused), status)
		return d

	case req.failed != nil:
		d := p.planWithout(seed)
		p.restoreProblem(&d, ReasonRestoreFailed, req.failed.Message, req.failed)
		return d

	case fetch.failed:
		status.Phase = v1beta2.RestoreFailed
		status.Message = fmt.Sprintf("%s failed and changed nothing: %s", req.origin, fetch.result.Reason)
		d := p.planWithout(seed)
		p.restoreProblem(&d, ReasonRestoreFailed, status.Message, status)
		return d

	case fetch.verified:
		// Commit: from this sync on, the restored cluster is the cluster.
		replaced := seedReplacedRevision(pod)
		rec := p.newRecord(v1beta2.BootstrapStatus{SeedMember: seed, Restore: &v1beta2.RestoreRecord{
			Request: req.id, Origin: req.origin, Source: req.source,
			Revision: status.Revision, EtcdVersion: status.EtcdVersion, BackupTime: status.BackupTime, RestoredAt: fetch.at,
			ReplacedRevision: replaced, Members: seedRestoreMembers(pod),
		}})
		if c := rec.Restore.Source.Chain; c != nil && status.Revision > 0 {
			// Every other member rebuilds exactly the state the seed
			// verified, whatever the chain has grown to since, or a moment
			// would resolve to.
			resolved := *c
			resolved.Resolved, resolved.History = status.Revision, fetch.result.History
			rec.Restore.Source.Chain = &resolved
		}
		// The restored history starts there: a restore after it, even
		// one before any of its members was seen, must start above it.
		rec.RevisionSeen = max(rec.RevisionSeen, roundRevision(restoredRevision(p.spec.Version, req.id, status.Revision, replaced)))
		// A snapshot object's sha256 pins it for every member; a chain's
		// state is rebuilt and checked by each (Chain.Resolved pins it).
		if fetch.result.SHA256 != "" && rec.Restore.Source.Chain == nil {
			rec.Restore.Source.SHA256 = fetch.result.SHA256
		}
		if src := rec.Restore.Source; src.S3 != nil && src.Chain == nil && strings.HasPrefix(fetch.result.Source, "s3://") {
			s3 := *src.S3
			s3.Path = strings.TrimPrefix(fetch.result.Source, "s3://")
			rec.Restore.Source.S3 = &s3
		}
		if p.rec != nil && p.rec.Bootstrapped {
			rec.RecreatedFrom = p.rec.SeedMember
		}
		p.rec = rec
		p.dropSuperseded()
		// What etcd said in this sync was said by the old cluster.
		p.o.Membership, p.o.Acted = nil, nil
		p.o.MembershipError = "the restored cluster's seed " + seed + " has not started yet"
		status.Phase, status.RestoredAt = v1beta2.RestoreRestoring, fetch.at
		status.Message = p.restoreCost(status)
		p.restoreStatus = status
		return p.planCurrent()
	}

	// Verifying: the running cluster goes on as if the seed were not there.
	status.Phase = v1beta2.RestoreVerifying
	status.Message = fmt.Sprintf("%s: the seed %s is fetching and verifying %s; the running members are untouched until it is verified", req.origin, seed, req.source.Location())
	if fetch.trouble != "" {
		status.Message += "; the last attempt failed and is retried: " + fetch.trouble
	}
	d := p.planWithout(seed)
	if pod != nil {
		d.Children = append(d.Children, plan.KeepPod(pod))
	} else {
		d.Children = append(d.Children, plan.Child{Kind: plan.KindPod, Name: seed, Object: p.restoreSeedPod(seed, req)})
	}
	if p.spec.Persistent() {
		if claim, ok := p.o.PVCs[seed]; ok {
			d.Children = append(d.Children, plan.KeepClaim(claim))
		} else {
			d.Children = append(d.Children, plan.Child{Kind: plan.KindPVC, Name: seed, Object: memberClaim(p.o.Cluster, p.spec, seed, seed)})
		}
	}
	plan.SortChildren(d.Children)
	d.Status.Restore = status
	setCondition(&d.Status, v1beta2.ConditionProgressing, conditionTrue(ReasonRestoring, status.Message), p)
	if d.ResyncAfter == 0 || d.ResyncAfter > resyncWaiting {
		d.ResyncAfter = resyncWaiting
	}
	return d
}

// carriedRestoreStatus is status.restore as the previous sync wrote it,
// unless the bootstrap record proves it stale. A restore is committed in
// one sync, and from then on only the record (in status.bootstrap and on
// the peer Service) says so; the phase in status.restore would otherwise
// have to be carried from sync to sync. It cannot be trusted to: a status
// write can be lost, and Metacontroller may sync on a parent its cache has
// not yet seen written, and then write the status that sync computed over
// the newer one. A cluster whose Restoring was lost that way would report
// Verifying for good while it ran on the restored data. So a committed
// request's phase is derived from the record: Restoring until the cluster
// matches its spec, then Completed (see status).
func (p *planner) carriedRestoreStatus() *v1beta2.ClusterRestoreStatus {
	st := p.committedRestoreStatus()
	if st != nil && st.Phase == v1beta2.RestoreRestoring {
		if trouble := p.restoredMembersTrouble(); trouble != "" {
			withTrouble := *st
			withTrouble.Message += "; " + trouble
			return &withTrouble
		}
	}
	return st
}

// restoredMembersTrouble says what keeps a restore's other members from
// starting, until they have formed a cluster: a fetch that failed for
// good, or one the kubelet retries. The seed's fetch was verified before
// the commit.
func (p *planner) restoredMembersTrouble() string {
	rec := p.rec
	if rec == nil || rec.Restore == nil || rec.Formed || len(rec.Restore.Members) < 2 {
		return ""
	}
	var out []string
	for _, name := range rec.Restore.Members[1:] {
		fetch := observeFetch(p.o.Pods[name])
		switch {
		case fetch.failed:
			out = append(out, fmt.Sprintf("member %s cannot restore the backup: %s", name, fetch.result.Reason))
		case fetch.trouble != "":
			out = append(out, fmt.Sprintf("member %s's fetch failed and is retried: %s", name, fetch.trouble))
		}
	}
	return strings.Join(out, "; ")
}

// committedRestoreStatus is carriedRestoreStatus before the members'
// trouble.
func (p *planner) committedRestoreStatus() *v1beta2.ClusterRestoreStatus {
	prev := p.o.Cluster.Status.Restore
	if p.rec == nil || p.rec.Restore == nil {
		return prev
	}
	done := p.rec.Restore
	if prev != nil {
		switch {
		case prev.Request == done.Request && (prev.Phase == v1beta2.RestoreRestoring || prev.Phase == v1beta2.RestoreCompleted):
			return prev
		case prev.Request != done.Request && (prev.Phase == v1beta2.RestoreFailed || prev.Phase == v1beta2.RestoreRefused):
			// A later request's outcome: the record only ever names the
			// newest committed one.
			return prev
		}
	}
	st := &v1beta2.ClusterRestoreStatus{
		Request: done.Request, Origin: done.Origin, Location: done.Source.Location(), Phase: v1beta2.RestoreRestoring,
		Revision: done.Revision, EtcdVersion: done.EtcdVersion, BackupTime: done.BackupTime, RestoredAt: done.RestoredAt,
	}
	if st.Origin == "" {
		// Records written before origins were recorded.
		st.Origin = done.Request
	}
	st.Message = p.restoreCost(st)
	return st
}

// planWithout plans the current cluster with the restore seed out of
// sight, and never starts an empty seed meanwhile: a cluster waiting for
// its data must not take writes without it.
func (p *planner) planWithout(seed string) Decision {
	p.editChildren()
	delete(p.o.Pods, seed)
	delete(p.o.PVCs, seed)
	p.holdEmptySeed = true
	return p.planCurrent()
}

// restoreProblem reports a refused or failed request on a cluster left as
// it was.
func (p *planner) restoreProblem(d *Decision, reason, message string, status *v1beta2.ClusterRestoreStatus) {
	d.Status.Restore = status
	cond := p.condition(v1beta2.ConditionDegraded, conditionTrue(reason, message))
	for i, c := range d.Status.Conditions {
		if c.Type == v1beta2.ConditionDegraded {
			if c.Status == metav1.ConditionTrue {
				cond.Message = message + "; " + c.Message
			}
			d.Status.Conditions[i] = cond
		}
	}
}

// restoreCost says what the restore brought back, and so what it lost:
// every write after the backup's revision.
func (p *planner) restoreCost(st *v1beta2.ClusterRestoreStatus) string {
	msg := fmt.Sprintf("%s: restoring %s", st.Origin, st.Location)
	if st.Revision != 0 {
		msg += fmt.Sprintf(" at revision %d: writes after that revision are not in the restored cluster", st.Revision)
	}
	if st.BackupTime != nil && st.RestoredAt != nil {
		msg += fmt.Sprintf("; the backup was taken %s, %s before the restore", st.BackupTime.UTC().Format("2006-01-02T15:04:05Z"), roughAge(st.RestoredAt.Sub(st.BackupTime.Time)))
	}
	return msg
}

// dropSuperseded takes the Pods and claims of every cluster the restored
// one replaced out of the observation, so that no plan renders them again
// and Metacontroller deletes them.
func (p *planner) dropSuperseded() {
	p.editChildren()
	first := p.firstSeedName()
	seedOf := func(annotations map[string]string) string {
		if s := annotations[AnnotationSeedMember]; s != "" {
			return s
		}
		return first
	}
	for name, pod := range p.o.Pods {
		if seedOf(pod.Annotations) != p.rec.SeedMember {
			delete(p.o.Pods, name)
		}
	}
	for name, claim := range p.o.PVCs {
		if seedOf(claim.Annotations) != p.rec.SeedMember {
			delete(p.o.PVCs, name)
		}
	}
}

// setCondition replaces one condition of a rendered status.
func setCondition(st *v1beta2.ClusterStatus, t v1beta2.ConditionType, c condition, p *planner) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			st.Conditions[i] = p.condition(t, c)
		}
	}
}

// roughAge says how long a span is, to the minute below a day, so that a
// message built from it changes rarely.
func roughAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "less than a minute"
	case d < 48*time.Hour:
		return d.Truncate(time.Minute).String()
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}
