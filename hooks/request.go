package hooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// Keys of the children map: Metacontroller keys each declared child type
// by Kind and apiVersion, and sends every declared type even when empty.
const (
	ChildPods     = "Pod.v1"
	ChildServices = "Service.v1"
	ChildPVCs     = "PersistentVolumeClaim.v1"
	ChildPDBs     = "PodDisruptionBudget.policy/v1"
	ChildSecrets  = "Secret.v1"
	// ChildNetworkPolicies is a fence's key.
	ChildNetworkPolicies = "NetworkPolicy.networking.k8s.io/v1"
)

// request is a sync or finalize request as Metacontroller sends it.
type request struct {
	Controller json.RawMessage                       `json:"controller"`
	Parent     *parent                               `json:"parent"`
	Children   map[string]map[string]json.RawMessage `json:"children"`
	Related    map[string]map[string]json.RawMessage `json:"related"`
	Finalizing bool                                  `json:"finalizing"`
}

// parent defers the spec: a spec that does not decode is the user's
// mistake in a stored object, which is answered with a status condition,
// not with an error that would stop every sync of the cluster.
type parent struct {
	APIVersion string                `json:"apiVersion"`
	Kind       string                `json:"kind"`
	Metadata   metav1.ObjectMeta     `json:"metadata"`
	Spec       json.RawMessage       `json:"spec"`
	Status     v1beta2.ClusterStatus `json:"status"`
}

// RequestError is a request the hook cannot act on. Status is the HTTP
// status to answer with.
type RequestError struct {
	Status int
	Msg    string
}

func (e *RequestError) Error() string { return e.Msg }

func badRequest(status int, format string, args ...any) error {
	return &RequestError{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// Decode turns a request body into what the planner observes.
func Decode(body []byte) (*etcdcluster.Observed, error) { return decode(body, nil) }

// decode calls parentDecoded, when given, with the parent decoded and the
// children not yet: they are most of the work.
func decode(body []byte, parentDecoded func(*etcdcluster.Observed)) (*etcdcluster.Observed, error) {
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest(400, "request body is not a Metacontroller hook request: %v", err)
	}
	p := req.Parent
	if p == nil {
		return nil, badRequest(422, "request has no parent")
	}
	if err := checkParent(p.APIVersion, p.Kind, p.Metadata, v1beta2.Kind); err != nil {
		return nil, err
	}
	cluster := &v1beta2.EtcdCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: p.APIVersion, Kind: p.Kind},
		ObjectMeta: p.Metadata,
		Status:     p.Status,
	}
	o := &etcdcluster.Observed{Cluster: cluster, Finalizing: req.Finalizing, SpecText: p.Spec}
	if err := decodeSpec(p.Spec, &cluster.Spec, "an EtcdCluster"); err != nil {
		o.SpecErrors = field.ErrorList{err}
	} else {
		o.SpecErrors = cluster.Validate()
	}
	// The related objects before the early start: the early read needs the
	// client certificate a TLS cluster's Secret holds.
	decodeClusterRelated(o, req.Related)
	var err error
	// The Secrets spec.TLS.auto renders are children.
	if o.SecretChildren, err = decodeChildren[corev1.Secret](req.Children, ChildSecrets); err != nil {
		return nil, err
	}
	if parentDecoded != nil {
		parentDecoded(o)
	}

	if o.Pods, err = decodeChildren[corev1.Pod](req.Children, ChildPods); err != nil {
		return nil, err
	}
	if o.Services, err = decodeChildren[corev1.Service](req.Children, ChildServices); err != nil {
		return nil, err
	}
	if o.PVCs, err = decodeChildren[corev1.PersistentVolumeClaim](req.Children, ChildPVCs); err != nil {
		return nil, err
	}
	if o.PDBs, err = decodeChildren[policyv1.PodDisruptionBudget](req.Children, ChildPDBs); err != nil {
		return nil, err
	}
	if o.NetworkPolicies, err = decodeChildren[networkingv1.NetworkPolicy](req.Children, ChildNetworkPolicies); err != nil {
		return nil, err
	}
	return o, nil
}

// decodeClusterRelated reads what the cluster's customize hook relates: the
// EtcdRestore named after the cluster, the namespace's EtcdBackups and the
// Secrets spec.TLS names. They are the user's objects, not Metacontroller's:
// one that does not decode is reported (an EtcdRestore) or passed over (an
// EtcdBackup; a Secret, which is then reported missing), and never fails
// the sync of a running cluster.
func decodeClusterRelated(o *etcdcluster.Observed, related map[string]map[string]json.RawMessage) {
	if raw, ok := related[RelatedRestores][o.Cluster.Name]; ok {
		var r v1beta2.EtcdRestore
		if err := json.Unmarshal(raw, &r); err != nil {
			var meta struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			}
			_ = json.Unmarshal(raw, &meta)
			r = v1beta2.EtcdRestore{ObjectMeta: meta.Metadata}
			o.RestoreRequestError = "the EtcdRestore does not decode: " + err.Error()
		}
		o.RestoreRequest = &r
	}
	for name, raw := range related[RelatedSecrets] {
		var secret corev1.Secret
		if json.Unmarshal(raw, &secret) == nil {
			if o.Secrets == nil {
				o.Secrets = map[string]*corev1.Secret{}
			}
			o.Secrets[name] = &secret
		}
	}
	if classes, ok := related[RelatedStorageClasses]; ok {
		// Present, even empty, when Metacontroller honoured the rule.
		o.StorageClasses = make(map[string]*storagev1.StorageClass, len(classes))
		for name, raw := range classes {
			var sc storagev1.StorageClass
			if json.Unmarshal(raw, &sc) == nil {
				o.StorageClasses[name] = &sc
			}
		}
	}
	for name, raw := range related[RelatedBackups] {
		var b v1beta2.EtcdBackup
		if json.Unmarshal(raw, &b) == nil {
			if o.Backups == nil {
				o.Backups = map[string]*v1beta2.EtcdBackup{}
			}
			o.Backups[name] = &b
		}
	}
}

// checkParent refuses a parent of another kind than the route serves, or
// without a name and namespace.
func checkParent(apiVersion, kind string, md metav1.ObjectMeta, want string) error {
	if apiVersion != v1beta2.APIVersion || kind != want {
		return badRequest(422, "parent is %s %q, this route serves %s %q", apiVersion, kind, v1beta2.APIVersion, want)
	}
	if md.Name == "" || md.Namespace == "" {
		return badRequest(422, "parent has no metadata.name or metadata.namespace")
	}
	return nil
}

// decodeSpec reports a spec that does not decode as the API server would
// report it: by field path, with the type the field needs.
func decodeSpec(raw json.RawMessage, spec any, what string) *field.Error {
	path := field.NewPath("spec")
	if len(raw) == 0 || string(raw) == "null" {
		return field.Required(path, what+" needs a spec")
	}
	err := json.Unmarshal(raw, spec)
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typeErr) && typeErr.Field != "":
		for _, part := range strings.Split(typeErr.Field, ".") {
			path = path.Child(part)
		}
		return field.TypeInvalid(path, typeErr.Value, "must be of type "+typeErr.Type.String())
	default:
		return field.Invalid(path, "", "does not decode: "+err.Error())
	}
}

func decodeChildren[T any](children map[string]map[string]json.RawMessage, key string) (map[string]*T, error) {
	raw := children[key]
	out := make(map[string]*T, len(raw))
	for name, obj := range raw {
		var v T
		if err := json.Unmarshal(obj, &v); err != nil {
			return nil, badRequest(400, "children[%q][%q] does not decode: %v", key, name, err)
		}
		out[name] = &v
	}
	return out, nil
}
