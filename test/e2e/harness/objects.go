package harness

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// Object is an unstructured Kubernetes object, exactly as it travels in JSON.
// The harness keeps everything unstructured because that is what Metacontroller
// sends and receives: the hook must cope with fields it did not write.
type Object = map[string]any

// Type keys as Metacontroller spells them in the request: Kind.apiVersion.
const (
	TypePod         = "Pod.v1"
	TypeService     = "Service.v1"
	TypePVC         = "PersistentVolumeClaim.v1"
	TypePDB         = "PodDisruptionBudget.policy/v1"
	TypeEtcdCluster = "EtcdCluster.etcd.database.coreos.com/v1beta2"
	TypeEtcdBackup  = "EtcdBackup.etcd.database.coreos.com/v1beta2"
	TypeEtcdRestore = "EtcdRestore.etcd.database.coreos.com/v1beta2"
	TypeSecret      = "Secret.v1"
	TypeNetPolicy   = "NetworkPolicy.networking.k8s.io/v1"
	TypeConfigMap   = "ConfigMap.v1"
	// TypeStorageClass is cluster-scoped: its objects have no namespace.
	TypeStorageClass = "StorageClass.storage.k8s.io/v1"

	// LabelControllerUID is the label Metacontroller's generateSelector puts on children.
	LabelControllerUID = "controller-uid"
	// AnnotationLastApplied is where Metacontroller keeps what the hook asked for last,
	// the base of its three-way merge.
	AnnotationLastApplied = "metacontroller.k8s.io/last-applied-configuration"
)

// clusterScoped tells the types whose objects live outside namespaces.
func clusterScoped(typ string) bool { return typ == TypeStorageClass }

// Ref names one object in the store; Namespace is "" for a cluster-scoped
// type.
type Ref struct {
	Type      string // Kind.apiVersion, e.g. TypePod
	Namespace string
	Name      string
}

func (r Ref) String() string { return r.Type + " " + r.Namespace + "/" + r.Name }

// TypeKey returns Kind.apiVersion for an object.
func TypeKey(obj Object) string {
	k, _ := obj["kind"].(string)
	v, _ := obj["apiVersion"].(string)
	return k + "." + v
}

// RefOf builds the Ref of an object.
func RefOf(obj Object) Ref {
	return Ref{Type: TypeKey(obj), Namespace: nestedString(obj, "metadata", "namespace"), Name: nestedString(obj, "metadata", "name")}
}

func nested(obj any, path ...string) (any, bool) {
	cur := obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		cur, ok = m[p]
		if !ok {
			return nil, false
		}
	}
	return cur, true
}

func nestedString(obj any, path ...string) string {
	v, _ := nested(obj, path...)
	s, _ := v.(string)
	return s
}

func nestedMap(obj any, path ...string) map[string]any {
	v, _ := nested(obj, path...)
	m, _ := v.(map[string]any)
	return m
}

func nestedInt(obj any, path ...string) (int64, bool) {
	v, ok := nested(obj, path...)
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case float64:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

// ensureMap returns obj[path...] as a map, creating the missing levels.
func ensureMap(obj map[string]any, path ...string) map[string]any {
	cur := obj
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	return cur
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := make(map[string]string, len(m))
	for k, val := range m {
		if s, ok := val.(string); ok {
			out[k] = s
		}
	}
	return out
}

// deepCopyJSON copies a JSON-shaped value. Values of other types are shared,
// which never happens for objects that went through normalize.
func deepCopyJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			out[k] = deepCopyJSON(val)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, val := range t {
			out[i] = deepCopyJSON(val)
		}
		return out
	default:
		return v
	}
}

func copyObject(o Object) Object {
	if o == nil {
		return nil
	}
	return deepCopyJSON(o).(map[string]any)
}

// normalize round-trips through JSON so that numbers are float64 and every
// value has a JSON type: comparisons with reflect.DeepEqual are then meaningful,
// as they are for Metacontroller's unstructured objects.
func normalize(v any) (Object, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode object: %w", err)
	}
	var out Object
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	return out, nil
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("harness: marshal %T: %v", v, err))
	}
	return data
}

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// controllerOwnerUID returns the uid of the ownerReference with
// controller: true, "" when there is none.
func controllerOwnerUID(obj Object) string {
	uid, _ := controllerRef(obj)
	return uid
}

func ownerUIDs(obj Object) []string {
	refs, _ := nested(obj, "metadata", "ownerReferences")
	list, _ := refs.([]any)
	var out []string
	for _, r := range list {
		m, _ := r.(map[string]any)
		if uid, _ := m["uid"].(string); uid != "" {
			out = append(out, uid)
		}
	}
	return out
}

func finalizersOf(obj Object) []string {
	v, _ := nested(obj, "metadata", "finalizers")
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, f := range list {
		if s, ok := f.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func setFinalizers(obj Object, fins []string) {
	md := ensureMap(obj, "metadata")
	if len(fins) == 0 {
		delete(md, "finalizers")
		return
	}
	list := make([]any, len(fins))
	for i, f := range fins {
		list[i] = f
	}
	md["finalizers"] = list
}

func isTerminating(obj Object) bool {
	_, ok := nested(obj, "metadata", "deletionTimestamp")
	return ok && nestedString(obj, "metadata", "deletionTimestamp") != ""
}
