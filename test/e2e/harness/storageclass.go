package harness

import (
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
)

// StorageClasses (storage.k8s.io/v1, cluster-scoped): what a test creates,
// the defaults and validation the API server applies, and what the
// emulated CSI driver behind every class can do.

const (
	// Provisioner is the provisioner of the classes CreateStorageClass
	// makes: the emulated CSI driver, which backs every claim with a host
	// directory (Kubelet.ClaimDir).
	Provisioner = "harness.etcd-hook.dev/hostpath"
	// ParamExpansion is the class parameter that tells the emulated driver
	// how it grows a volume: ExpansionOffline grows the file system only
	// when the volume is next mounted (a new Pod); anything else, or no
	// parameter, grows a mounted volume in place (online).
	ParamExpansion   = "harness.etcd-hook.dev/expansion"
	ExpansionOffline = "offline"

	// AnnotationDefaultClass marks the default StorageClass.
	AnnotationDefaultClass     = "storageclass.kubernetes.io/is-default-class"
	annotationBetaDefaultClass = "storageclass.beta.kubernetes.io/is-default-class"
)

// StorageClassOptions are the traits of a StorageClass the hook can tell
// apart.
type StorageClassOptions struct {
	// AllowVolumeExpansion sets allowVolumeExpansion: true; without it the
	// API server refuses to raise a claim's storage request.
	AllowVolumeExpansion bool
	// Default marks the class as the default one
	// (storageclass.kubernetes.io/is-default-class: "true"): claims created
	// without spec.storageClassName get it.
	Default bool
	// OfflineExpansion makes the driver grow a volume's file system only
	// when it is next mounted: a grown claim stays FileSystemResizePending
	// until a new Pod mounts it (parameter ParamExpansion: offline).
	OfflineExpansion bool
	// Labels are the class's labels, for related-resource selectors.
	Labels map[string]string
}

// StorageClassObject is the StorageClass CreateStorageClass creates.
func StorageClassObject(name string, opts StorageClassOptions) Object {
	md := map[string]any{"name": name}
	if opts.Default {
		md["annotations"] = map[string]any{AnnotationDefaultClass: "true"}
	}
	if len(opts.Labels) > 0 {
		labels := map[string]any{}
		for k, v := range opts.Labels {
			labels[k] = v
		}
		md["labels"] = labels
	}
	sc := Object{
		"apiVersion":  "storage.k8s.io/v1",
		"kind":        "StorageClass",
		"metadata":    md,
		"provisioner": Provisioner,
	}
	if opts.AllowVolumeExpansion {
		sc["allowVolumeExpansion"] = true
	}
	if opts.OfflineExpansion {
		sc["parameters"] = map[string]any{ParamExpansion: ExpansionOffline}
	}
	return sc
}

// CreateStorageClass creates a StorageClass of the emulated driver.
func (e *Env) CreateStorageClass(name string, opts StorageClassOptions) error {
	_, err := e.API.Create(StorageClassObject(name, opts))
	return err
}

// SetStorageClassExpansion sets a class's allowVolumeExpansion, the one
// trait of a class that may change after its creation, as kubectl patch
// would. Parents that related StorageClasses are synced.
func (e *Env) SetStorageClassExpansion(name string, allow bool) error {
	ref := Ref{Type: TypeStorageClass, Name: name}
	sc, ok := e.API.Get(ref)
	if !ok {
		return fmt.Errorf("storage class %s: %w", name, ErrNotFound)
	}
	if allow {
		sc["allowVolumeExpansion"] = true
	} else {
		delete(sc, "allowVolumeExpansion")
	}
	_, _, err := e.API.Update(sc)
	return err
}

// defaultStorageClass fills in what the API server defaults in a new class.
func defaultStorageClass(sc Object) {
	if _, ok := sc["reclaimPolicy"]; !ok {
		sc["reclaimPolicy"] = "Delete"
	}
	if _, ok := sc["volumeBindingMode"]; !ok {
		sc["volumeBindingMode"] = string(storagev1.VolumeBindingImmediate)
	}
}

func isDefaultClass(sc Object) bool {
	ann := nestedMap(sc, "metadata", "annotations")
	return ann[AnnotationDefaultClass] == "true" || ann[annotationBetaDefaultClass] == "true"
}

// offlineExpansion tells a class whose driver grows file systems only at
// mount time.
func offlineExpansion(sc Object) bool {
	return nestedString(sc, "parameters", ParamExpansion) == ExpansionOffline
}

// validateStorageClassUpdate is ValidateStorageClassUpdate: everything but
// allowVolumeExpansion (and metadata) is immutable.
func validateStorageClassUpdate(before, after *storagev1.StorageClass) error {
	var errs []string
	for _, f := range []struct {
		path     string
		old, new any
	}{
		{"parameters", before.Parameters, after.Parameters},
		{"provisioner", before.Provisioner, after.Provisioner},
		{"reclaimPolicy", before.ReclaimPolicy, after.ReclaimPolicy},
		{"volumeBindingMode", before.VolumeBindingMode, after.VolumeBindingMode},
	} {
		if jsonOf(f.old) != jsonOf(f.new) {
			errs = append(errs, fmt.Sprintf("%s: Invalid value: %s: field is immutable", f.path, mustJSON(f.new)))
		}
	}
	return fieldErrors("StorageClass", after.Name, errs)
}
