package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// The API server validates and re-serialises built-in types. Doing the same
// here matters: fields the hook gets wrong (a string where a number belongs,
// an unknown field, an empty env value that the server drops) would otherwise
// look fine in the harness and fail or hot-loop on a real cluster.

var (
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	dns1035Label     = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	envVarName       = regexp.MustCompile(`^[-._a-zA-Z][-._a-zA-Z0-9]*$`)
)

func typedFor(typ string) any {
	switch typ {
	case TypePod:
		return &corev1.Pod{}
	case TypeService:
		return &corev1.Service{}
	case TypePVC:
		return &corev1.PersistentVolumeClaim{}
	case TypePDB:
		return &policyv1.PodDisruptionBudget{}
	case TypeConfigMap:
		return &corev1.ConfigMap{}
	case TypeStorageClass:
		return &storagev1.StorageClass{}
	}
	return nil
}

// roundTrip decodes obj into its Go type (if the harness knows one) and encodes
// it back, dropping unknown and empty-omitted fields as the API server does.
func roundTrip(typ string, obj Object) (Object, any, error) {
	t := typedFor(typ)
	if t == nil {
		return obj, nil, nil
	}
	if err := json.Unmarshal(mustJSON(obj), t); err != nil {
		return nil, nil, fmt.Errorf("%w: decode as %s: %w", ErrInvalid, typ, err)
	}
	out, err := normalize(t)
	if err != nil {
		return nil, nil, err
	}
	return out, t, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func checkName(re *regexp.Regexp, max int, what, name string) error {
	if len(name) > max || !re.MatchString(name) {
		return invalid("%s %q must match %s and be at most %d characters", what, name, re, max)
	}
	return nil
}

func validateCreate(typ string, obj Object) (Object, error) {
	out, typed, err := roundTrip(typ, obj)
	if err != nil {
		return nil, err
	}
	name := nestedString(out, "metadata", "name")
	switch t := typed.(type) {
	case *corev1.Pod:
		if err := checkName(dns1123Subdomain, 253, "metadata.name", name); err != nil {
			return nil, err
		}
		if err := validatePodSpec(&t.Spec); err != nil {
			return nil, err
		}
	case *corev1.Service:
		if err := checkName(dns1035Label, 63, "metadata.name", name); err != nil {
			return nil, err
		}
		for i, p := range t.Spec.Ports {
			if p.Port < 1 || p.Port > 65535 {
				return nil, invalid("spec.ports[%d].port %d out of range", i, p.Port)
			}
		}
	case *corev1.PersistentVolumeClaim:
		if err := checkName(dns1123Subdomain, 253, "metadata.name", name); err != nil {
			return nil, err
		}
		if len(t.Spec.AccessModes) == 0 {
			return nil, invalid("spec.accessModes: Required value")
		}
		if _, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			return nil, invalid("spec.resources.requests[storage]: Required value")
		}
	case *policyv1.PodDisruptionBudget:
		if err := checkName(dns1123Subdomain, 253, "metadata.name", name); err != nil {
			return nil, err
		}
		if t.Spec.MinAvailable != nil && t.Spec.MaxUnavailable != nil {
			return nil, invalid("spec: minAvailable and maxUnavailable cannot be both set")
		}
	case *storagev1.StorageClass:
		if err := checkName(dns1123Subdomain, 253, "metadata.name", name); err != nil {
			return nil, err
		}
		if t.Provisioner == "" {
			return nil, invalid("StorageClass %q is invalid: provisioner: Required value", name)
		}
	default:
		if err := checkName(dns1123Subdomain, 253, "metadata.name", name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func validatePodSpec(spec *corev1.PodSpec) error {
	if len(spec.Containers) == 0 {
		return invalid("spec.containers: Required value")
	}
	for _, f := range []struct{ what, v string }{{"spec.hostname", spec.Hostname}, {"spec.subdomain", spec.Subdomain}} {
		if f.v != "" {
			if err := checkName(dns1123Label, 63, f.what, f.v); err != nil {
				return err
			}
		}
	}
	switch spec.RestartPolicy {
	case "", corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		return invalid("spec.restartPolicy: Unsupported value %q", spec.RestartPolicy)
	}
	vols := map[string]bool{}
	for i, v := range spec.Volumes {
		if err := checkName(dns1123Label, 63, fmt.Sprintf("spec.volumes[%d].name", i), v.Name); err != nil {
			return err
		}
		if vols[v.Name] {
			return invalid("spec.volumes[%d].name: Duplicate value %q", i, v.Name)
		}
		vols[v.Name] = true
	}
	names := map[string]bool{}
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for i, c := range all {
		path := fmt.Sprintf("spec.containers[%s]", c.Name)
		if err := checkName(dns1123Label, 63, fmt.Sprintf("container %d name", i), c.Name); err != nil {
			return err
		}
		if names[c.Name] {
			return invalid("%s: Duplicate value %q", path, c.Name)
		}
		names[c.Name] = true
		if strings.TrimSpace(c.Image) == "" {
			return invalid("%s.image: Required value", path)
		}
		mounts := map[string]bool{}
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				return invalid("%s.volumeMounts.name: Not found: %q", path, m.Name)
			}
			if m.MountPath == "" || mounts[m.MountPath] {
				return invalid("%s.volumeMounts.mountPath: invalid or duplicate %q", path, m.MountPath)
			}
			mounts[m.MountPath] = true
		}
		for _, p := range c.Ports {
			if p.ContainerPort < 1 || p.ContainerPort > 65535 {
				return invalid("%s.ports.containerPort %d out of range", path, p.ContainerPort)
			}
		}
		for _, e := range c.Env {
			if !envVarName.MatchString(e.Name) {
				return invalid("%s.env.name %q is not a valid environment variable name", path, e.Name)
			}
		}
	}
	return nil
}

func validateUpdate(typ string, old, obj Object) (Object, error) {
	out, typed, err := roundTrip(typ, obj)
	if err != nil {
		return nil, err
	}
	switch t := typed.(type) {
	case *corev1.Pod:
		var before corev1.Pod
		if err := json.Unmarshal(mustJSON(old), &before); err != nil {
			return nil, fmt.Errorf("decode stored pod: %w", err)
		}
		if err := validatePodUpdate(t.Name, &before.Spec, &t.Spec); err != nil {
			return nil, err
		}
	case *corev1.Service:
		oldIP := nestedString(old, "spec", "clusterIP")
		switch {
		case t.Spec.ClusterIP == "":
			// The API server keeps the allocated value when a PUT omits it.
			if oldIP != "" {
				ensureMap(out, "spec")["clusterIP"] = oldIP
			}
		case t.Spec.ClusterIP != oldIP:
			return nil, invalid("Service %q: spec.clusterIP: Invalid value: %q: field is immutable", t.Name, t.Spec.ClusterIP)
		}
	case *corev1.PersistentVolumeClaim:
		var before corev1.PersistentVolumeClaim
		if err := json.Unmarshal(mustJSON(old), &before); err != nil {
			return nil, fmt.Errorf("decode stored pvc: %w", err)
		}
		if err := validateClaimUpdate(&before, t); err != nil {
			return nil, err
		}
	case *storagev1.StorageClass:
		var before storagev1.StorageClass
		if err := json.Unmarshal(mustJSON(old), &before); err != nil {
			return nil, fmt.Errorf("decode stored storage class: %w", err)
		}
		if err := validateStorageClassUpdate(&before, t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func jsonOf(v any) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, mustJSON(v), "", " "); err != nil {
		return string(mustJSON(v))
	}
	return buf.String()
}

// validatePodUpdate enforces Pod spec immutability: only container images,
// activeDeadlineSeconds and added tolerations may change.
func validatePodUpdate(name string, before, after *corev1.PodSpec) error {
	b := after.DeepCopy()
	if len(b.Containers) == len(before.Containers) {
		for i := range b.Containers {
			b.Containers[i].Image = before.Containers[i].Image
		}
	}
	if len(b.InitContainers) == len(before.InitContainers) {
		for i := range b.InitContainers {
			b.InitContainers[i].Image = before.InitContainers[i].Image
		}
	}
	b.ActiveDeadlineSeconds = before.ActiveDeadlineSeconds
	if len(b.Tolerations) >= len(before.Tolerations) {
		prefix := true
		for i := range before.Tolerations {
			if jsonOf(before.Tolerations[i]) != jsonOf(b.Tolerations[i]) {
				prefix = false
			}
		}
		if prefix {
			b.Tolerations = before.Tolerations
		}
	}
	if d := cmp.Diff(jsonOf(before), jsonOf(b)); d != "" {
		return invalid("Pod %q is invalid: spec: Forbidden: pod updates may not change fields other than "+
			"spec.containers[*].image, spec.initContainers[*].image, spec.activeDeadlineSeconds, "+
			"spec.tolerations (only additions to existing tolerations) (-old +new):\n%s", name, d)
	}
	return nil
}
