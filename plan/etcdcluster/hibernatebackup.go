package etcdcluster

import (
	"fmt"
	"strings"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// A cluster whose members keep their data on an emptyDir hibernates
// through a final backup (spec.hibernation.backup), in this order:
//  1. The hook raises its write fence (membership.Fence: etcd's CORRUPT
//     alarm under the hook's own member ID) through the leader, with a
//     quorum. etcd then refuses every write, and still serves reads and
//     snapshots.
//  2. Once the members report the fence, status.hibernation.request asks
//     the named EtcdBackup for a final backup, with the revision the
//     members hold behind the fence. The EtcdBackup's planner runs it
//     beside its others (plan/etcdbackup's final.go).
//  3. The run is verified: it succeeded, for this request, at the fenced
//     revision or later, in a store this cluster can restore from. Its
//     source goes into status.hibernation.source.
//  4. Only once the status this request carries holds the source do the
//     member Pods go, in the order of a hibernation on claims.
//  5. Waking with no member left restores the source (restoreRequested),
//     and lifts the fence, which the backup holds too, as the first step
//     once a quorum answers (nextStep). The record goes once the fence is
//     lifted.
//
// A backup that fails leaves every member running, behind the fence, with
// a Degraded condition naming the store; the EtcdBackup retries it.
// Setting spec.hibernated back to false lifts the fence.
const (
	// ReasonFencing: the hook raises its write fence before the final
	// backup.
	ReasonFencing = "Fencing"
	// ReasonFinalBackup: writes are fenced, and the final backup is under
	// way.
	ReasonFinalBackup = "FinalBackup"
	// ReasonFinalBackupFailed: the final backup failed, or cannot be
	// taken; the members run on behind the fence.
	ReasonFinalBackupFailed = "FinalBackupFailed"
	// ReasonWritesFenced: the hook's fence stands on a cluster that is not
	// hibernating; the hook lifts it.
	ReasonWritesFenced = "WritesFenced"
	// ReasonLiftingFence: the step that lifts it.
	ReasonLiftingFence = "LiftingFence"
)

// hibernationRestorePrefix prefixes the ID of the restore that wakes a
// cluster from its final backup.
const hibernationRestorePrefix = "hibernation/"

// hibernateThroughBackup plans a sync of a cluster on emptyDir asked to
// hibernate. It reports done once the status carries a verified final
// backup: the member Pods may then go.
func (p *planner) hibernateThroughBackup() (d Decision, done bool) {
	if prev := p.o.Cluster.Status.Hibernation; prev != nil && prev.Source != nil {
		// The data is in the recorded backup, whatever the spec names now.
		carried := *prev
		p.hib = &carried
		return Decision{}, true
	}
	pol := p.spec.Hibernation
	if pol == nil || pol.Backup == "" {
		return p.frozen(ReasonHibernationRefused, "spec.hibernated is true, and the members keep their data on an emptyDir, which goes with their Pods: "+
			"hibernating would lose the cluster's data, so it is left running as it is. Hibernation needs spec.pod.persistentVolumeClaimSpec, "+
			"or spec.hibernation.backup naming an EtcdBackup of this cluster to take a final backup, which waking restores"), false
	}
	h := &v1beta2.HibernationStatus{Backup: pol.Backup}
	if prev := p.o.Cluster.Status.Hibernation; prev != nil && prev.Backup == pol.Backup {
		carried := *prev
		h = &carried
	}
	p.hib = h
	if len(p.o.Pods) == 0 {
		return p.frozen(ReasonHibernationRefused, "spec.hibernated is true, but no member runs and no final backup was taken: there is nothing to back up. "+
			"Restore a backup (an EtcdRestore), or set spec.hibernated to false"), false
	}
	ms := p.o.Membership
	fenced := ms != nil && membership.Fenced(ms.Alarms())
	b, refused := p.finalBackupTaker(pol.Backup)
	if refused != "" && !fenced {
		return p.frozen(ReasonHibernationRefused, "spec.hibernated is true, but the final backup cannot be taken: "+refused+"; the cluster is left running as it is, and no write is fenced"), false
	}
	if ms == nil || ms.Stale || !membership.HasQuorum(ms) || ms.LeaderID == 0 {
		return p.held(ReasonFencing, "spec.hibernated: the final backup waits for a quorum and a leader to fence writes with"), false
	}
	if !fenced {
		// A request made behind an earlier fence (one lifted by hand since)
		// is no more: writes may have been taken after its revision.
		h.Request, h.FencedRevision = "", 0
		if out := p.o.Acted; out != nil {
			d := p.held(ReasonFencing, "spec.hibernated: raising the write fence before the final backup")
			if out.Err != nil {
				d = p.held(ReasonFencing, fmt.Sprintf("%s failed, and is tried again: %v", out.Action, out.Err))
			}
			return d, false
		}
		d := p.held(ReasonFencing, "spec.hibernated: fencing writes off before the final backup, so that it holds every write etcd acknowledged")
		d.Action = p.fenceAction(membership.ActionRaiseFence, ReasonFencing, "writes are fenced off before the final backup (spec.hibernation.backup "+pol.Backup+")")
		return d, false
	}
	for _, m := range ms.Members {
		h.FencedRevision = max(h.FencedRevision, m.Revision)
	}
	if h.FencedRevision == 0 {
		// No member said how far it got: the backup could not be checked
		// against it.
		return p.held(ReasonFencing, "spec.hibernated: writes are fenced; waiting for a member to report its revision before the final backup"), false
	}
	if h.Request == "" {
		h.Request = v1beta2.HibernationRequest(p.o.Cluster.Name, p.o.Cluster.Generation, h.FencedRevision)
	}
	if refused != "" {
		return p.finalBackupFailed(refused), false
	}
	run := b.Status.LastRun
	if run == nil || run.Request != h.Request || run.End == nil {
		return p.held(ReasonFinalBackup, fmt.Sprintf("spec.hibernated: writes are fenced at revision %d; waiting for EtcdBackup %s to take the final backup (request %s)",
			h.FencedRevision, b.Name, h.Request)), false
	}
	if !run.Succeeded {
		return p.finalBackupFailed(fmt.Sprintf("the final backup by EtcdBackup %s (run %s, to %s) failed: %s; the EtcdBackup tries again", b.Name, run.Name, backupStore(b), run.Reason)), false
	}
	src, _ := resolvedBackup(b)
	switch last := b.Status.LastBackup; {
	case last == nil || src.Location() == "":
		return p.finalBackupFailed(fmt.Sprintf("EtcdBackup %s reports its final run %s succeeded, but no backup a restore could read", b.Name, run.Name)), false
	case last.Revision < h.FencedRevision:
		return p.finalBackupFailed(fmt.Sprintf("the final backup at %s is at revision %d, older than the fenced revision %d: it may miss acknowledged writes", last.Location, last.Revision, h.FencedRevision)), false
	default:
		t := last.Time
		h.Source, h.Revision, h.Time = &src, last.Revision, &t
	}
	return p.held(ReasonFinalBackup, fmt.Sprintf("spec.hibernated: the final backup is verified at %s (revision %d); the members stop once the status records it",
		src.Location(), h.Revision)), false
}

// finalBackupFailed keeps every member running behind the fence, and
// says why and how out.
func (p *planner) finalBackupFailed(why string) Decision {
	d := p.frozen(ReasonFinalBackupFailed, why+". Every member runs on with writes fenced off: set spec.hibernated to false to lift the fence")
	d.ResyncAfter = resyncTrouble
	return d
}

// finalBackupTaker is the EtcdBackup spec.hibernation.backup names, or
// why it cannot take the final backup.
func (p *planner) finalBackupTaker(name string) (*v1beta2.EtcdBackup, string) {
	b, ok := p.o.Backups[name]
	switch {
	case !ok:
		return nil, fmt.Sprintf("there is no EtcdBackup %q (spec.hibernation.backup) in namespace %s", name, p.o.Cluster.Namespace)
	case b.Spec.ClusterName != p.o.Cluster.Name:
		return nil, fmt.Sprintf("EtcdBackup %q (spec.hibernation.backup) backs up %s, not this cluster: its spec.clusterName must be %q", name, orNone(b.Spec.ClusterName), p.o.Cluster.Name)
	case b.Spec.BackupPolicy.Continuous():
		return nil, fmt.Sprintf("EtcdBackup %q (spec.hibernation.backup) is continuous; a final backup is a snapshot: name one without deltaIntervalInSecond", name)
	case b.DeletionTimestamp != nil:
		return nil, fmt.Sprintf("EtcdBackup %q (spec.hibernation.backup) is being deleted", name)
	}
	return b, ""
}

func orNone(s string) string {
	if s == "" {
		return "no EtcdCluster (it names endpoints)"
	}
	return "EtcdCluster " + s
}

// backupStore names where an EtcdBackup writes, for a condition.
func backupStore(b *v1beta2.EtcdBackup) string {
	if pvc := b.Spec.PVC; b.Spec.StorageType == v1beta2.BackupStoragePVC && pvc != nil {
		return "pvc://" + pvc.ClaimName + "/" + pvc.FilePath()
	}
	if s3 := b.Spec.S3; s3 != nil {
		where := "s3://" + s3.Path
		if s3.Endpoint != "" {
			where += " at " + s3.Endpoint
		}
		return where
	}
	return "no store"
}

// fenceAction raises or lifts the fence through the leader.
func (p *planner) fenceAction(t membership.ActionType, step, reason string) *membership.Action {
	ms := p.o.Membership
	a := &membership.Action{Type: t, Reason: reason, Step: step, LeaderID: ms.LeaderID}
	for _, m := range ms.Members {
		if m.ID != ms.LeaderID {
			continue
		}
		a.Name = membership.MemberName(m, p.o.Cluster.Name)
		a.LeaderEndpoint = p.clientEndpoint(memberView{Member: m, name: a.Name})
	}
	return a
}

// liftFence is the first membership step of a cluster that is not
// hibernating and holds the hook's fence: woken from a final backup,
// which holds the fence too, or asked to wake before its members went.
func (p *planner) liftFence(leader memberView) (stepResult, bool) {
	if p.spec.Hibernated || !membership.Fenced(p.o.Membership.Alarms()) {
		return stepResult{}, false
	}
	a := membership.Action{Type: membership.ActionLiftFence, Name: leader.name, MemberID: leader.ID,
		Reason: "the hook's write fence is lifted: the cluster is not hibernating"}
	return acting(a, ReasonLiftingFence), true
}

// hibernationRestoreDue: the cluster woke from a final backup, and no
// member is left to hold its data.
func (p *planner) hibernationRestoreDue() bool {
	h := p.o.Cluster.Status.Hibernation
	if p.spec.Hibernated || h == nil || h.Source == nil {
		return false
	}
	id := hibernationRestorePrefix + h.Request
	if p.rec != nil && p.rec.Restore != nil && p.rec.Restore.Request == id {
		// Committed: the restored members hold the data now.
		return false
	}
	for _, pod := range p.o.Pods {
		if pod.Annotations[AnnotationRestoreRequest] != id && !podFinished(pod) {
			// A member that still runs holds the data: it is woken as it is.
			return false
		}
	}
	return true
}

// hibernationRestore is the request that restores the final backup.
func (p *planner) hibernationRestore() *restoreRequest {
	h := p.o.Cluster.Status.Hibernation
	req := &restoreRequest{
		id: hibernationRestorePrefix + h.Request, origin: "the final backup before hibernating (EtcdBackup " + h.Backup + ")",
		source: *h.Source,
	}
	if h.Time != nil {
		req.backup = &v1beta2.KnownBackup{EtcdBackup: h.Backup, Location: h.Source.Location(), Revision: h.Revision, Time: *h.Time}
	}
	return req
}

// hibernationRecord is status.hibernation as this sync writes it: what
// the hibernation planned, or the record carried while the cluster
// hibernates, holds the fence, or waits for the final backup's restore.
func (p *planner) hibernationRecord() *v1beta2.HibernationStatus {
	if p.hib != nil {
		return p.hib
	}
	h := p.o.Cluster.Status.Hibernation
	switch {
	case h == nil || p.spec.Hibernated:
		return h
	case p.o.Membership != nil && membership.Fenced(p.o.Membership.Alarms()):
		return h
	case h.Source != nil && (p.o.Membership == nil || p.hibernationRestoreDue()):
		return h
	}
	return nil
}

// hibernatedMessage says where a hibernated cluster's data waits.
func (p *planner) hibernatedMessage() string {
	if h := p.hibernationRecord(); h != nil && h.Source != nil {
		return fmt.Sprintf("spec.hibernated: no member runs; the cluster's data waits in its final backup at %s (revision %d), which waking restores. Set spec.hibernated to false to bring it back",
			h.Source.Location(), h.Revision)
	}
	return fmt.Sprintf("spec.hibernated: no member runs; the data of %d members waits on their claims (%s). Set spec.hibernated to false to bring them back",
		len(p.o.PVCs), strings.Join(sorted(keysOf(p.o.PVCs)), ", "))
}
