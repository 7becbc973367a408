package etcdbackup

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// What a continuous backup's status says, from the archiver's answer.

// reportArchive writes what the archiver says into the status: the chain
// whenever it changes, the newest delta and the RPO at most every
// statusRefresh, and BackupReady.
func (p *planner) reportArchive(pod *corev1.Pod) {
	if p.ready.reason == "" {
		p.ready = p.archiveReady(pod)
	}
	var obs ArchiveObservation
	if pod != nil {
		obs = p.o.Archive[pod.Name]
	}
	st := obs.Status
	if st == nil || !st.Chained() {
		return
	}
	prev := p.o.Backup.Status
	chain := &v1beta2.BackupChain{
		Location: p.chainLocation(), ClusterID: st.History, StartRevision: st.ChainStart,
		LastSnapshotRevision: st.LastSnapshotRevision, LastSnapshotTime: metaTime(st.LastSnapshotTime),
	}
	for _, b := range st.ChainBreaks {
		chain.Breaks = append(chain.Breaks, v1beta2.ChainBreak{Time: metav1.NewTime(b.At.UTC().Truncate(time.Second)), From: b.From, To: b.To})
	}
	p.status.Chain = chain
	// When the figures were last written, not when the archiver last
	// stored: with the store out of reach no delta is stored, and the RPO,
	// which grows every second, would otherwise be written on every sync,
	// each write bringing the next.
	stale := prev.Chain == nil || prev.Chain.ReportedAt == nil || p.o.Now.Sub(prev.Chain.ReportedAt.Time) >= statusRefresh ||
		prev.Chain.ClusterID != chain.ClusterID || prev.Chain.StartRevision != chain.StartRevision
	if stale || p.readyChanged() {
		rpo := int64(st.RPO() / time.Second)
		p.status.LastDeltaRevision, p.status.LastDeltaTime, p.status.RPOSeconds = st.LastDeltaRevision, metaTime(st.LastDeltaTime), &rpo
		chain.ReportedAt = metaTime(&p.o.Now)
	} else {
		chain.ReportedAt = prev.Chain.ReportedAt
	}
	rev, at := p.status.LastDeltaRevision, p.status.LastDeltaTime
	if rev == 0 {
		rev, at = st.LastSnapshotRevision, metaTime(st.LastSnapshotTime)
	}
	p.status.EtcdRevision, p.status.LastSuccessDate = rev, at
	p.status.Succeeded = p.ready.status == metav1.ConditionTrue
	p.status.Reason = ""
	if !p.status.Succeeded {
		p.status.Reason = p.ready.message
	}
	if at != nil {
		p.status.LastBackup = &v1beta2.StoredBackup{Location: p.chainLocation(), Revision: rev, ClusterID: st.History, Time: *at}
	}
}

// readyChanged: BackupReady differs from the status the request carries.
func (p *planner) readyChanged() bool {
	for _, c := range p.o.Backup.Status.Conditions {
		if c.Type == ConditionBackupReady {
			return c.Status != p.ready.status || c.Reason != p.ready.reason
		}
	}
	return true
}

// archiveReady is BackupReady from the archiver's answer: False once the
// oldest change not stored is older than three delta intervals, and,
// for an archiver that does not answer, once it has had three intervals
// and a minute to start (scheduling, the image, its first listing).
func (p *planner) archiveReady(pod *corev1.Pod) cond {
	limit := 3 * p.deltaInterval()
	if pod == nil {
		return cond{metav1.ConditionFalse, ReasonArchiverStart, "the archiver is being created"}
	}
	obs := p.o.Archive[pod.Name]
	if obs.Status == nil {
		// A new Pod is given time to be scheduled, pulled and started.
		age := p.o.Now.Sub(pod.CreationTimestamp.Time)
		why := obs.Error
		if why == "" {
			why = "it has no address yet"
		}
		if pod.CreationTimestamp.IsZero() || age < limit+time.Minute {
			return cond{metav1.ConditionFalse, ReasonArchiverStart, fmt.Sprintf("archiver %s is starting: %s", pod.Name, why)}
		}
		return cond{metav1.ConditionFalse, ReasonArchiverSilent, fmt.Sprintf("archiver %s does not report: %s%s", pod.Name, why, waitingReason(pod))}
	}
	st := obs.Status
	if !st.Chained() {
		msg := fmt.Sprintf("archiver %s is taking the first snapshot of the chain", pod.Name)
		if st.LastError != "" {
			msg += "; the last attempt failed: " + st.LastError
		}
		return cond{metav1.ConditionFalse, ReasonSnapshotPending, msg}
	}
	if rpo := st.RPO(); rpo > limit {
		// Not the RPO itself, which changes every second: the message is
		// part of the status, and each change of it another sync.
		msg := fmt.Sprintf("changes wait longer than 3 delta intervals (%s) to be stored; status.rpoSeconds says how long", limit)
		if st.LastError != "" {
			msg += ": " + st.LastError
		}
		return cond{metav1.ConditionFalse, ReasonDeltasBehind, msg}
	}
	msg := fmt.Sprintf("every change is stored within %s; the chain begins at revision %d", p.deltaInterval(), st.ChainStart)
	if n := len(st.ChainBreaks); n > 0 {
		b := st.ChainBreaks[n-1]
		msg += fmt.Sprintf(" (a new chain since %s: the archiver fell behind compaction, and revisions %d to %d are in no delta)", b.At.UTC().Format(time.RFC3339), b.From, b.To)
	}
	return cond{metav1.ConditionTrue, ReasonArchiving, msg}
}

// chainLocation is where the archiver writes: the spec's key, then
// ChainDir.
func (p *planner) chainLocation() string {
	spec := p.o.Backup.Spec
	if spec.StorageType == v1beta2.BackupStoragePVC && spec.PVC != nil {
		return "pvc://" + spec.PVC.ClaimName + "/" + spec.PVC.FilePath() + v1beta2.ChainDir
	}
	if spec.S3 != nil {
		return "s3://" + spec.S3.Path + v1beta2.ChainDir
	}
	return ""
}

func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &m
}
