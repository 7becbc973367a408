package etcdcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

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
	case p.hibernationRestoreDue():
		req = p.hibernationRestore()
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
	if req.refused = chainTarget(req, r); req.refused != "" {
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
			if req.source.Location() == "" && b.Spec.BackupPolicy.Continuous() {
				req.refused = fmt.Sprintf("EtcdBackup %q is continuous, and its spec names no store to read its chain from", b.Name)
			} else if req.source.Location() == "" {
				req.refused = fmt.Sprintf("EtcdBackup %q reports its backup at %q, which is neither in S3 nor on a claim", b.Name, b.Status.LastBackup.Location)
			}
		}
	default:
		req.refused = "no source: give s3, pvc or backup"
	}
	return req
}

// resolvedBackup is where an EtcdBackup's newest backup is, with the
// credentials its spec uses to write there. A continuous backup's is its
// chain, at the key its spec writes under: the restore rebuilds the newest
// state stored (the status says only how new it was when last written),
// with the backup's own key if it is encrypted.
func resolvedBackup(b *v1beta2.EtcdBackup) (v1beta2.ResolvedSource, *v1beta2.KnownBackup) {
	last := b.Status.LastBackup
	known := &v1beta2.KnownBackup{EtcdBackup: b.Name, Location: last.Location, Revision: last.Revision, EtcdVersion: last.EtcdVersion, Time: last.Time}
	if b.Spec.BackupPolicy.Continuous() {
		src := v1beta2.ResolvedSource{Chain: &v1beta2.ChainTarget{Encryption: b.Spec.Encryption}}
		switch {
		case b.Spec.StorageType == v1beta2.BackupStoragePVC && b.Spec.PVC != nil:
			pvc := *b.Spec.PVC
			pvc.Path = pvc.FilePath()
			src.PVC = &pvc
		case b.Spec.S3 != nil:
			s3 := *b.Spec.S3
			src.S3 = &s3
		}
		return src, known
	}
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

// chainTarget applies an EtcdRestore's revision, time and key to its
// resolved source, or says why they cannot apply. A source is a chain when
// it is a continuous EtcdBackup, when its path runs through a chain's
// directory, or when the EtcdRestore names a state along one.
func chainTarget(req *restoreRequest, r *v1beta2.EtcdRestore) (refused string) {
	t := r.Target()
	src := &req.source
	path := ""
	switch {
	case src.S3 != nil:
		path = src.S3.Path
	case src.PVC != nil:
		path = src.PVC.FilePath()
	}
	switch {
	case src.Chain != nil:
		if t != nil {
			if t.Encryption == nil {
				t.Encryption = src.Chain.Encryption
			}
			src.Chain = t
		}
	case req.backup != nil && t != nil:
		return fmt.Sprintf("EtcdBackup %q takes snapshots only (no spec.backupPolicy.deltaIntervalInSecond): it has no chain to restore a revision, a time or an encrypted state from", req.backup.EtcdBackup)
	case t != nil:
		src.Chain = t
	case strings.Contains(path, v1beta2.ChainDir):
		src.Chain = &v1beta2.ChainTarget{}
	}
	return ""
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
