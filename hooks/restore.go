package hooks

import (
	"encoding/json"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
	"github.com/etcdhook/etcd-hook/plan/etcdrestore"
)

// RestoreSyncHandler serves the EtcdRestore sync hook. An EtcdRestore has
// no children: its cluster carries it out, and this hook only reports.
// It serves the finalize hook too: there is nothing to undo.
func RestoreSyncHandler(now func() time.Time) http.Handler {
	return RestoreHandler(RestoreConfig{Now: now})
}

// RestoreConfig is what the EtcdRestore hooks need beyond the request.
type RestoreConfig struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Observe, if set, is told of every sync or finalize answered with
	// 200 (the per-object metrics; see server/clustermetrics.go).
	Observe func(o *etcdrestore.Observed, d etcdrestore.Decision, finalizing bool)
}

// RestoreHandler is RestoreSyncHandler with a RestoreConfig.
func RestoreHandler(cfg RestoreConfig) http.Handler {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		o, finalizing, err := DecodeRestore(body)
		if err != nil {
			writeDecodeError(w, err)
			return
		}
		o.Now = now()
		d := etcdrestore.Plan(o)
		out, err := encodeAnswer(&d.Status, nil, d.ResyncAfter, finalizing, true)
		if err != nil {
			WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		if cfg.Observe != nil {
			cfg.Observe(o, d, finalizing)
		}
		writeJSON(w, out)
	})
}

type restoreParent struct {
	APIVersion string                `json:"apiVersion"`
	Kind       string                `json:"kind"`
	Metadata   metav1.ObjectMeta     `json:"metadata"`
	Spec       json.RawMessage       `json:"spec"`
	Status     v1beta2.RestoreStatus `json:"status"`
}

func checkRestoreParent(p *restoreParent) error {
	if p == nil {
		return badRequest(422, "request has no parent")
	}
	return checkParent(p.APIVersion, p.Kind, p.Metadata, v1beta2.KindRestore)
}

// DecodeRestore turns an EtcdRestore hook request into what its planner
// observes, and says whether it is a finalize request.
func DecodeRestore(body []byte) (*etcdrestore.Observed, bool, error) {
	var req struct {
		Parent     *restoreParent                        `json:"parent"`
		Related    map[string]map[string]json.RawMessage `json:"related"`
		Finalizing bool                                  `json:"finalizing"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, false, badRequest(400, "request body is not a Metacontroller hook request: %v", err)
	}
	p := req.Parent
	if err := checkRestoreParent(p); err != nil {
		return nil, false, err
	}
	r := &v1beta2.EtcdRestore{
		TypeMeta:   metav1.TypeMeta{APIVersion: p.APIVersion, Kind: p.Kind},
		ObjectMeta: p.Metadata,
		Status:     p.Status,
	}
	o := &etcdrestore.Observed{Restore: r}
	if err := decodeSpec(p.Spec, &r.Spec, "an EtcdRestore"); err != nil {
		o.SpecErrors = field.ErrorList{err}
	} else {
		o.SpecErrors = r.Validate()
	}
	var err error
	if o.Clusters, err = decodeChildren[v1beta2.EtcdCluster](req.Related, RelatedClusters); err != nil {
		return nil, false, err
	}
	if o.Secrets, err = decodeChildren[corev1.Secret](req.Related, RelatedSecrets); err != nil {
		return nil, false, err
	}
	if o.Backups, err = decodeChildren[v1beta2.EtcdBackup](req.Related, RelatedBackups); err != nil {
		return nil, false, err
	}
	return o, req.Finalizing, nil
}

// RestoreCustomizeHandler serves the EtcdRestore customize hook: the
// EtcdCluster it restores, its S3 Secret and the EtcdBackup it names.
func RestoreCustomizeHandler() http.Handler {
	return customizeHandler(func(body []byte) (any, error) {
		var req struct {
			Parent *restoreParent `json:"parent"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, badRequest(400, "request body is not a Metacontroller customize request: %v", err)
		}
		if err := checkRestoreParent(req.Parent); err != nil {
			return nil, err
		}
		// A spec that does not decode relates nothing; the sync hook says why.
		var spec v1beta2.RestoreSpec
		_ = json.Unmarshal(req.Parent.Spec, &spec)
		return etcdrestore.Related(req.Parent.Metadata.Namespace, spec), nil
	})
}

// CustomizeHandler serves the EtcdCluster customize hook: the EtcdRestore
// named after the cluster, the EtcdBackups of its namespace and the
// Secrets spec.TLS names, which then arrive in every sync request. This is how the hook learns of a restore
// request without Kubernetes credentials of its own.
func CustomizeHandler() http.Handler {
	return customizeHandler(func(body []byte) (any, error) {
		var req struct {
			Parent *parent `json:"parent"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, badRequest(400, "request body is not a Metacontroller customize request: %v", err)
		}
		p := req.Parent
		if p == nil {
			return nil, badRequest(422, "request has no parent")
		}
		if err := checkParent(p.APIVersion, p.Kind, p.Metadata, v1beta2.Kind); err != nil {
			return nil, err
		}
		// The status says which Secrets members still run with while they
		// move from spec.TLS.static to auto (status.TLS.static).
		c := &v1beta2.EtcdCluster{ObjectMeta: p.Metadata, Status: p.Status}
		// A spec that does not decode relates no Secret; the sync then
		// reports the spec, which freezes the cluster anyway.
		_ = json.Unmarshal(p.Spec, &c.Spec)
		return etcdcluster.Related(c), nil
	})
}

// customizeHandler answers a customize request with the related
// resources relate finds.
func customizeHandler(relate func(body []byte) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		related, err := relate(body)
		if err != nil {
			writeDecodeError(w, err)
			return
		}
		out, err := json.Marshal(map[string]any{"relatedResources": related})
		if err != nil {
			WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, out)
	})
}
