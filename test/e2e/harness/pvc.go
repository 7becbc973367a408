package harness

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// PersistentVolumeClaims as the API server and the PV controller treat
// them (Kubernetes 1.33+): the DefaultStorageClass admission plugin and the
// binding of a new claim at its creation, the validation of an update, and
// the PersistentVolumeClaimResize admission plugin. Growing a bound claim's
// volume is VolumeController's (volumecontroller.go).

const (
	// betaStorageClassAnnotation is the class of a claim before
	// spec.storageClassName existed; the API server still honours it.
	betaStorageClassAnnotation = "volume.beta.kubernetes.io/storage-class"
	// claimForbiddenResize is the PersistentVolumeClaimResize plugin's refusal.
	claimForbiddenResize = "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
)

// bindPVC plays the provisioner and the PV controller with an immediately
// binding class: the new claim gets a volume of the size it requests, and
// is Bound. The harness has no WaitForFirstConsumer topology to honour, and
// binds a claim whether its class exists or not (a cluster would leave a
// claim of a missing class Pending).
func bindPVC(pvc Object) {
	uid := nestedString(pvc, "metadata", "uid")
	spec := ensureMap(pvc, "spec")
	if _, ok := spec["volumeName"]; !ok {
		spec["volumeName"] = "pvc-" + uid
	}
	st := map[string]any{"phase": "Bound"}
	if am, ok := spec["accessModes"]; ok {
		st["accessModes"] = deepCopyJSON(am)
	}
	if req := nestedString(spec, "resources", "requests", "storage"); req != "" {
		st["capacity"] = map[string]any{"storage": req}
	}
	pvc["status"] = st
}

// defaultClaimClassLocked is the DefaultStorageClass admission plugin: a
// claim that names no class (spec.storageClassName absent, and no beta
// annotation) gets the default class, the newest one when several are
// marked default (ties by name). An explicit "" means no class and stays.
// Claims created while there is no default class keep no class: they are
// bound at once here, and the PV controller's retroactive assignment only
// concerns claims still Pending.
func (s *APIServer) defaultClaimClassLocked(pvc Object) {
	spec := ensureMap(pvc, "spec")
	if v, ok := spec["storageClassName"]; ok && v != nil {
		return
	}
	if _, ok := nestedMap(pvc, "metadata", "annotations")[betaStorageClassAnnotation]; ok {
		return
	}
	if name := s.defaultClassLocked(); name != "" {
		spec["storageClassName"] = name
	}
}

func (s *APIServer) defaultClassLocked() string {
	var defaults []Object
	for _, sc := range s.listLocked(TypeStorageClass, "", false) {
		if isDefaultClass(sc) {
			defaults = append(defaults, sc)
		}
	}
	if len(defaults) == 0 {
		return ""
	}
	sort.Slice(defaults, func(i, j int) bool {
		ti, tj := nestedString(defaults[i], "metadata", "creationTimestamp"), nestedString(defaults[j], "metadata", "creationTimestamp")
		if ti != tj {
			return ti > tj // RFC 3339 in UTC sorts as time does
		}
		return nestedString(defaults[i], "metadata", "name") < nestedString(defaults[j], "metadata", "name")
	})
	return nestedString(defaults[0], "metadata", "name")
}

// claimClass is the claim's class name, from the beta annotation first, as
// the API server's helper reads it; "" means none.
func claimClass(pvc *corev1.PersistentVolumeClaim) string {
	if c, ok := pvc.Annotations[betaStorageClassAnnotation]; ok {
		return c
	}
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName
	}
	return ""
}

// validateClaimUpdate is ValidatePersistentVolumeClaimUpdate, for what the
// hook can change: the spec is immutable but for the storage request (and
// volumeAttributesClassName) of a bound claim, spec.volumeName once, and a
// storageClassName that was not set; the request may go down (to recover
// from a failed expansion) but never to status.capacity or below.
func validateClaimUpdate(before, after *corev1.PersistentVolumeClaim) error {
	var errs []string
	a, b := before.Spec.DeepCopy(), after.Spec.DeepCopy()
	if a.VolumeName == "" {
		a.VolumeName = b.VolumeName
	}
	if a.StorageClassName == nil && b.StorageClassName != nil {
		if ann, ok := before.Annotations[betaStorageClassAnnotation]; !ok || ann == *b.StorageClassName {
			a.StorageClassName = b.StorageClassName
		}
	}
	// The status is the stored one: a PUT of the main resource cannot change it.
	if after.Status.Phase == corev1.ClaimBound {
		if b.Resources.Requests != nil {
			if q, ok := a.Resources.Requests[corev1.ResourceStorage]; ok {
				b.Resources.Requests[corev1.ResourceStorage] = q
			} else {
				delete(b.Resources.Requests, corev1.ResourceStorage)
			}
		}
		b.VolumeAttributesClassName = a.VolumeAttributesClassName
	}
	if d := cmp.Diff(jsonOf(a), jsonOf(b)); d != "" {
		errs = append(errs, "spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n(-old +new):\n"+d)
	}
	oldSize := before.Spec.Resources.Requests[corev1.ResourceStorage]
	newSize := after.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity := before.Status.Capacity[corev1.ResourceStorage]
	if newSize.Cmp(oldSize) < 0 && newSize.Cmp(capacity) <= 0 {
		errs = append(errs, "spec.resources.requests.storage: Forbidden: field can not be less than status.capacity")
	}
	return fieldErrors("PersistentVolumeClaim", after.Name, errs)
}

// fieldErrors is the API server's 422 message: one field error as it is,
// several in brackets.
func fieldErrors(kind, name string, errs []string) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return invalid("%s %q is invalid: %s", kind, name, errs[0])
	}
	return invalid("%s %q is invalid: [%s]", kind, name, strings.Join(errs, ", "))
}

// admitClaimResizeLocked is the PersistentVolumeClaimResize admission
// plugin: a larger storage request needs a bound claim whose class (the
// same before and after) exists and has allowVolumeExpansion: true. Its
// refusals are a 403 on a cluster; here they are ErrInvalid like every
// other refusal, so that Metacontroller records them as ApplyErrors.
func (s *APIServer) admitClaimResizeLocked(cur, next Object) error {
	var before, after corev1.PersistentVolumeClaim
	if err := decodeInto(cur, &before); err != nil {
		return err
	}
	if err := decodeInto(next, &after); err != nil {
		return err
	}
	oldSize := before.Spec.Resources.Requests[corev1.ResourceStorage]
	newSize := after.Spec.Resources.Requests[corev1.ResourceStorage]
	if newSize.Cmp(oldSize) <= 0 {
		return nil
	}
	forbidden := func(msg string) error {
		return invalid("persistentvolumeclaims %q is forbidden: %s", after.Name, msg)
	}
	if before.Status.Phase != corev1.ClaimBound {
		return forbidden("Only bound persistent volume claims can be expanded")
	}
	class, oldClass := claimClass(&after), claimClass(&before)
	if class == "" || class != oldClass {
		return forbidden(claimForbiddenResize)
	}
	sc, ok := s.objs[Ref{Type: TypeStorageClass, Name: class}]
	if allow, _ := nested(sc, "allowVolumeExpansion"); !ok || allow != true {
		return forbidden(claimForbiddenResize)
	}
	return nil
}

func decodeInto(obj Object, into any) error {
	if err := json.Unmarshal(mustJSON(obj), into); err != nil {
		return fmt.Errorf("decode stored %s: %w", TypeKey(obj), err)
	}
	return nil
}

// claimStorage reads a claim's storage quantities: the request, the
// capacity and the allocated size (zero when absent).
func claimStorage(pvc Object) (request, capacity, allocated resource.Quantity) {
	parse := func(path ...string) resource.Quantity {
		q, _ := resource.ParseQuantity(nestedString(pvc, path...))
		return q
	}
	return parse("spec", "resources", "requests", "storage"), parse("status", "capacity", "storage"),
		parse("status", "allocatedResources", "storage")
}
