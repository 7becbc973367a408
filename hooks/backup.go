package hooks

import (
	"encoding/json"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan/etcdbackup"
)

// Keys of the related map (hook version v1): like children, by Kind and
// apiVersion, then by name within the parent's namespace.
const (
	RelatedSecrets  = "Secret.v1"
	RelatedClaims   = "PersistentVolumeClaim.v1"
	RelatedClusters = v1beta2.Kind + "." + v1beta2.APIVersion
	RelatedRestores = v1beta2.KindRestore + "." + v1beta2.APIVersion
	RelatedBackups  = v1beta2.KindBackup + "." + v1beta2.APIVersion
	// RelatedStorageClasses: the EtcdCluster customize hook relates them
	// for a cluster on claims.
	RelatedStorageClasses = "StorageClass.storage.k8s.io/v1"
)

// BackupConfig is what the EtcdBackup hooks need beyond the request.
type BackupConfig struct {
	// AgentImage is this project's image; runs start its backup mode.
	AgentImage string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Observe, if set, is told of every sync answered with 200 (the
	// per-object metrics; see server/clustermetrics.go).
	Observe func(*etcdbackup.Observed, etcdbackup.Decision)
	// ArchiveStatus reads continuous backups' archivers; HTTP at the
	// Pod's IP when nil.
	ArchiveStatus ArchiveStatusReader
}

// BackupSyncHandler serves the EtcdBackup sync hook, and
// BackupFinalizeHandler its finalize hook.
func BackupSyncHandler(cfg BackupConfig) http.Handler     { return backupHandler{cfg, false} }
func BackupFinalizeHandler(cfg BackupConfig) http.Handler { return backupHandler{cfg, true} }

type backupHandler struct {
	cfg      BackupConfig
	finalize bool
}

type backupParent struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Metadata   metav1.ObjectMeta    `json:"metadata"`
	Spec       json.RawMessage      `json:"spec"`
	Status     v1beta2.BackupStatus `json:"status"`
}

type backupRequest struct {
	Parent     *backupParent                         `json:"parent"`
	Children   map[string]map[string]json.RawMessage `json:"children"`
	Related    map[string]map[string]json.RawMessage `json:"related"`
	Finalizing bool                                  `json:"finalizing"`
}

func (h backupHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	o, err := DecodeBackup(body)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	o.Finalizing = o.Finalizing || h.finalize
	o.AgentImage = h.cfg.AgentImage
	if !o.Finalizing {
		reader := h.cfg.ArchiveStatus
		if reader == nil {
			reader = HTTPArchiveStatus{}
		}
		o.Archive = readArchivers(r.Context(), reader, o.Pods)
	}
	o.Now = time.Now()
	if h.cfg.Now != nil {
		o.Now = h.cfg.Now()
	}
	d := etcdbackup.Plan(o)
	out, err := encodeAnswer(&d.Status, d.Children, d.ResyncAfter, h.finalize, d.Finalized)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if h.cfg.Observe != nil {
		h.cfg.Observe(o, d)
	}
	writeJSON(w, out)
}

// DecodeBackup turns an EtcdBackup hook request into what its planner
// observes. A spec that does not decode is a condition, not an error.
func DecodeBackup(body []byte) (*etcdbackup.Observed, error) {
	var req backupRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest(400, "request body is not a Metacontroller hook request: %v", err)
	}
	p := req.Parent
	if err := checkBackupParent(p); err != nil {
		return nil, err
	}
	b := &v1beta2.EtcdBackup{
		TypeMeta:   metav1.TypeMeta{APIVersion: p.APIVersion, Kind: p.Kind},
		ObjectMeta: p.Metadata,
		Status:     p.Status,
	}
	o := &etcdbackup.Observed{Backup: b, Finalizing: req.Finalizing}
	if err := decodeSpec(p.Spec, &b.Spec, "an EtcdBackup"); err != nil {
		o.SpecErrors = field.ErrorList{err}
	} else {
		o.SpecErrors = b.Validate()
	}
	var err error
	if o.Pods, err = decodeChildren[corev1.Pod](req.Children, ChildPods); err != nil {
		return nil, err
	}
	if o.Secrets, err = decodeChildren[corev1.Secret](req.Related, RelatedSecrets); err != nil {
		return nil, err
	}
	if o.Claims, err = decodeChildren[corev1.PersistentVolumeClaim](req.Related, RelatedClaims); err != nil {
		return nil, err
	}
	if o.Clusters, err = decodeChildren[v1beta2.EtcdCluster](req.Related, RelatedClusters); err != nil {
		return nil, err
	}
	return o, nil
}

// checkBackupParent refuses a request without an EtcdBackup parent.
func checkBackupParent(p *backupParent) error {
	if p == nil {
		return badRequest(422, "request has no parent")
	}
	return checkParent(p.APIVersion, p.Kind, p.Metadata, v1beta2.KindBackup)
}

// BackupCustomizeHandler serves the EtcdBackup customize hook: the objects
// a sync needs that are not its children, the S3 Secret (or the claim),
// the clientTLSSecret and the named EtcdCluster, which then arrive in
// every sync request's related map. The hook so reads them without
// Kubernetes credentials of its own.
func BackupCustomizeHandler() http.Handler {
	return customizeHandler(func(body []byte) (any, error) {
		var req struct {
			Parent *backupParent `json:"parent"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, badRequest(400, "request body is not a Metacontroller customize request: %v", err)
		}
		if err := checkBackupParent(req.Parent); err != nil {
			return nil, err
		}
		// A spec that does not decode relates nothing; the sync hook says why.
		var spec v1beta2.BackupSpec
		_ = json.Unmarshal(req.Parent.Spec, &spec)
		return etcdbackup.Related(req.Parent.Metadata.Namespace, spec), nil
	})
}
