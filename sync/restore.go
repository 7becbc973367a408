package sync

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
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
//     the snapshot (with etcd's own tool) and starts; the other members join
//     it one at a time as learners, as in any scale-up.
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
type restoreRequest struct {
	id, origin string
	source     v1beta2.ResolvedSource
	// backup is what an EtcdBackup's status says of the backup, when the
	// source is one.
	backup *v1beta2.KnownBackup
	// refused says why the request is not carried out; the rest is unset.
	refused string
	// failed is the status of an earlier attempt that failed for good.
	failed *v1beta2.ClusterRestoreStatus
}

// restoreRequested is the restore the user asks for now, or nil: an
// EtcdRestore named after the cluster, spec.restore of a cluster that never
// ran, or the disaster-recovery policy once every member is lost. A request
// already done or failed is nil; one that cannot be carried out comes back
// refused.
func (p *planner) restoreRequested() *restoreRequest {
	var req *restoreRequest
	switch {
	case p.o.RestoreRequest != nil && p.o.RestoreRequest.DeletionTimestamp == nil:
		req = p.restoreObjectRequest(p.o.RestoreRequest)
	case p.spec.Restore != nil && (p.rec == nil || !p.rec.Bootstrapped):
		req = p.resolve("spec.restore/"+sourceHash(*p.spec.Restore), "spec.restore", *p.spec.Restore)
	case p.autoRestoreDue():
		req = p.resolve("autoRestore/"+p.rec.SeedMember, "spec.disasterRecovery.autoRestore", v1beta2.RestoreSource{Backup: &v1beta2.BackupRef{Name: p.newest.EtcdBackup}})
	default:
		return nil
	}
	if p.rec != nil && p.rec.Restore != nil && p.rec.Restore.Request == req.id {
		return nil
	}
	// A failure is final for its request, and reported while the request
	// stands; a refusal is looked at again, since what it lacked (an
	// EtcdBackup's first backup, say) may come.
	if prev := p.o.Cluster.Status.Restore; prev != nil && prev.Request == req.id && prev.Phase == v1beta2.RestoreFailed {
		req.failed = prev
	}
	return req
}

func (p *planner) restoreObjectRequest(r *v1beta2.EtcdRestore) *restoreRequest {
	id, origin := "EtcdRestore/"+string(r.UID), "EtcdRestore "+r.Name
	if p.o.RestoreRequestError != "" {
		return &restoreRequest{id: id, origin: origin, refused: p.o.RestoreRequestError}
	}
	if errs := r.Validate(); len(errs) > 0 {
		return &restoreRequest{id: id, origin: origin, refused: "the EtcdRestore is invalid: " + errs.ToAggregate().Error()}
	}
	req := p.resolve(id, origin, r.Source())
	if req.refused != "" {
		return req
	}
	if done := p.rec; done != nil && done.Restore != nil && done.Restore.Source.Location() == req.source.Location() &&
		r.Annotations[v1beta2.AnnotationRestoreAgain] != done.Restore.Request {
		req.refused = fmt.Sprintf("the cluster was already restored from %s (request %s); an EtcdRestore applied again does not restore again. "+
			"To restore from it once more: kubectl annotate etcdrestore -n %s %s %s=%s",
			req.source.Location(), done.Restore.Request, r.Namespace, r.Name, v1beta2.AnnotationRestoreAgain, done.Restore.Request)
	}
	return req
}

// resolve turns a source into the one object to fetch: an EtcdBackup
// stands for its newest backup, in the store it writes to.
func (p *planner) resolve(id, origin string, src v1beta2.RestoreSource) *restoreRequest {
	req := &restoreRequest{id: id, origin: origin}
	switch {
	case src.S3 != nil:
		req.source.S3 = src.S3
	case src.PVC != nil:
		req.source.PVC = src.PVC
	case src.Backup != nil:
		b, ok := p.o.Backups[src.Backup.Name]
		switch {
		case !ok:
			req.refused = fmt.Sprintf("there is no EtcdBackup %q in namespace %s", src.Backup.Name, p.o.Cluster.Namespace)
		case b.Status.LastBackup == nil:
			req.refused = fmt.Sprintf("EtcdBackup %q has no successful backup yet", src.Backup.Name)
		default:
			req.source, req.backup = resolvedBackup(b)
			if req.source.Location() == "" {
				req.refused = fmt.Sprintf("EtcdBackup %q reports its backup at %q, which is neither in S3 nor on a claim", b.Name, b.Status.LastBackup.Location)
			}
		}
	default:
		req.refused = "no source: give s3, pvc or backup"
	}
	return req
}

// resolvedBackup is where an EtcdBackup's newest backup is, with the
// credentials its spec uses to write there.
func resolvedBackup(b *v1beta2.EtcdBackup) (v1beta2.ResolvedSource, *v1beta2.KnownBackup) {
	last := b.Status.LastBackup
	known := &v1beta2.KnownBackup{EtcdBackup: b.Name, Location: last.Location, Revision: last.Revision, EtcdVersion: last.EtcdVersion, Time: last.Time}
	src := v1beta2.ResolvedSource{SHA256: last.SHA256}
	switch {
	case strings.HasPrefix(last.Location, "s3://") && b.Spec.S3 != nil:
		s3 := *b.Spec.S3
		s3.Path = strings.TrimPrefix(last.Location, "s3://")
		src.S3 = &s3
	case strings.HasPrefix(last.Location, "pvc://"):
		claim, path, _ := strings.Cut(strings.TrimPrefix(last.Location, "pvc://"), "/")
		src.PVC = &v1beta2.PVCBackupSource{ClaimName: claim, Path: path}
	}
	return src, known
}

// newestBackup is the newest backup known for this cluster: that of the
// EtcdBackup the disaster-recovery policy names, or else the newest of
// those whose clusterName names the cluster.
func (p *planner) newestBackup() *v1beta2.KnownBackup {
	var newest *v1beta2.KnownBackup
	named := ""
	if dr := p.spec.DisasterRecovery; dr != nil {
		named = dr.Backup
	}
	for name, b := range p.o.Backups {
		if b.Status.LastBackup == nil || (named != "" && name != named) || (named == "" && b.Spec.ClusterName != p.o.Cluster.Name) {
			continue
		}
		_, known := resolvedBackup(b)
		if newest == nil || known.Time.After(newest.Time.Time) || (known.Time.Equal(&newest.Time) && known.EtcdBackup < newest.EtcdBackup) {
			newest = known
		}
	}
	return newest
}

// autoRestoreDue: every member is lost, and the owner opted in to
// restoring the newest backup without being asked.
func (p *planner) autoRestoreDue() bool {
	dr := p.spec.DisasterRecovery
	return dr != nil && dr.AutoRestore && p.newest != nil && p.rec != nil && p.rec.Bootstrapped &&
		p.survivors() == 0 && len(p.o.Services)+len(p.o.PDBs) > 0
}

func sourceHash(src v1beta2.RestoreSource) string {
	data, _ := json.Marshal(src)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// restoreSeedName is the seed of the cluster a request restores: derived,
// so that every sync of the same request names the same Pod.
func (p *planner) restoreSeedName(id string) string {
	c := p.o.Cluster
	return SeedName(c.Name, string(c.UID)+"/restore/"+id)
}

// fetchState is what the seed's fetch init container has said so far.
type fetchState struct {
	verified bool
	// failed is set when the backup cannot be used: retrying cannot help.
	failed bool
	// trouble is the latest failure that is retried.
	trouble string
	result  fetchResult
	at      *metav1.Time
}

func observeFetch(pod *corev1.Pod) fetchState {
	var st fetchState
	if pod == nil {
		return st
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		switch cs.Name {
		case restoreFetchContainer:
			for _, t := range []*corev1.ContainerStateTerminated{cs.LastTerminationState.Terminated, cs.State.Terminated} {
				if t == nil {
					continue
				}
				var res fetchResult
				_ = json.Unmarshal([]byte(t.Message), &res)
				switch {
				case t.ExitCode == 0:
					st.verified, st.failed, st.trouble = true, false, ""
					st.result = res
					at := t.FinishedAt
					st.at = &at
				case t.ExitCode == FetchExitUnusable:
					st.failed, st.result = true, res
				default:
					st.trouble = res.Reason
					if st.trouble == "" {
						st.trouble = fmt.Sprintf("exit code %d: %s", t.ExitCode, strings.TrimSpace(t.Message))
					}
				}
			}
		case restoreApplyContainer:
			if cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0 {
				st.verified, st.failed = true, false
			}
		}
	}
	if podStarted(pod) {
		st.verified, st.failed = true, false
	}
	if st.failed && st.result.Reason == "" {
		st.result.Reason = "the fetch found the backup unusable"
	}
	return st
}

// planRestore carries the request one step further; see the top of this
// file for the steps.
func (p *planner) planRestore(req *restoreRequest) Decision {
	seed := p.restoreSeedName(req.id)
	// On a cluster restored before, dropSuperseded took every Pod of
	// another etcd cluster than the recorded one out of view: this
	// request's seed among them, which belongs to the cluster the request
	// is making. Without it the fetch is never seen verified, and the
	// request never committed.
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
	if strings.HasPrefix(fetch.result.Source, "s3://") {
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
		rec := &v1beta2.BootstrapStatus{SeedMember: seed, Restore: &v1beta2.RestoreRecord{
			Request: req.id, Origin: req.origin, Source: req.source,
			Revision: status.Revision, EtcdVersion: status.EtcdVersion, BackupTime: status.BackupTime, RestoredAt: fetch.at,
		}}
		if fetch.result.SHA256 != "" {
			rec.Restore.Source.SHA256 = fetch.result.SHA256
		}
		if src := rec.Restore.Source; src.S3 != nil && strings.HasPrefix(fetch.result.Source, "s3://") {
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
		d.Children = append(d.Children, keepPod(pod))
	} else {
		d.Children = append(d.Children, Child{Kind: KindPod, Name: seed, Object: p.restoreSeedPod(seed, req)})
	}
	if p.spec.Persistent() {
		if claim, ok := p.o.PVCs[seed]; ok {
			d.Children = append(d.Children, keep(KindPVC, seed, claim.Annotations, func() any { return claim }))
		} else {
			d.Children = append(d.Children, Child{Kind: KindPVC, Name: seed, Object: memberClaim(p.o.Cluster, p.spec, seed, seed)})
		}
	}
	sortChildren(d.Children)
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
	first := SeedName(p.o.Cluster.Name, string(p.o.Cluster.UID))
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
		case restoring && (p.rec == nil || p.rec.SeedMember != name):
			out[name] = true
		case p.rec != nil && p.rec.Restore != nil && seed != p.rec.SeedMember:
			out[name] = true
		}
	}
	return out
}

// fetchResult is the part of the fetch step's result (agent.RestoreResult,
// its termination message) the planner reads. It is declared here rather
// than imported: the agent's tests run real etcd through packages that
// import this one.
type fetchResult struct {
	Reason      string `json:"reason"`
	Source      string `json:"source"`
	SHA256      string `json:"sha256"`
	Revision    int64  `json:"revision"`
	EtcdVersion string `json:"etcdVersion"`
}

// FetchExitUnusable is the fetch step's exit code for a backup that cannot
// be used (agent.ExitBackupUnusable; server's tests check they agree).
const FetchExitUnusable = 3
