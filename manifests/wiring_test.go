// The Metacontroller wiring the hook depends on: the CompositeController,
// the hook's Service, and the top-level kustomization.

package manifests_test

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// compositeController holds the CompositeController fields checked here.
type compositeController struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		GenerateSelector    bool `json:"generateSelector"`
		ResyncPeriodSeconds int  `json:"resyncPeriodSeconds"`
		ParentResource      struct {
			APIVersion string `json:"apiVersion"`
			Resource   string `json:"resource"`
		} `json:"parentResource"`
		ChildResources []struct {
			APIVersion     string `json:"apiVersion"`
			Resource       string `json:"resource"`
			UpdateStrategy *struct {
				Method string `json:"method"`
			} `json:"updateStrategy"`
		} `json:"childResources"`
		Hooks map[string]struct {
			Webhook *struct {
				URL     string `json:"url"`
				Timeout string `json:"timeout"`
			} `json:"webhook"`
		} `json:"hooks"`
	} `json:"spec"`
}

// TestCompositeController checks the wiring the hook relies on: the parent,
// every child type with a strategy that never calls the hook concurrently,
// and the hook URLs.
func TestCompositeController(t *testing.T) {
	docs := readDocuments(t, compositeControllerFile)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", compositeControllerFile, len(docs))
	}
	var cc compositeController
	b, err := json.Marshal(docs[0].data)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cc); err != nil {
		t.Fatal(err)
	}

	if cc.APIVersion != "metacontroller.k8s.io/v1alpha1" || cc.Kind != "CompositeController" {
		t.Errorf("apiVersion/kind %s/%s, want metacontroller.k8s.io/v1alpha1/CompositeController", cc.APIVersion, cc.Kind)
	}
	if !cc.Spec.GenerateSelector {
		t.Error("generateSelector must be true: EtcdCluster has no selector of its own")
	}
	if p := cc.Spec.ParentResource; p.APIVersion != v1beta2.APIVersion || p.Resource != "etcdclusters" {
		t.Errorf("parentResource %s %s, want %s etcdclusters", p.APIVersion, p.Resource, v1beta2.APIVersion)
	}
	if cc.Spec.ResyncPeriodSeconds <= 0 {
		t.Errorf("resyncPeriodSeconds %d: membership is observed outside the API, so periodic resyncs are needed", cc.Spec.ResyncPeriodSeconds)
	}

	wantMethods := map[string]string{
		"v1/pods":                              "InPlace",
		"v1/services":                          "InPlace",
		"v1/persistentvolumeclaims":            "InPlace",
		"policy/v1/poddisruptionbudgets":       "InPlace",
		"v1/secrets":                           "InPlace",
		"networking.k8s.io/v1/networkpolicies": "InPlace",
	}
	// Metacontroller's enum, minus the Rolling* methods: with those the
	// sync hook is called concurrently, and this hook has side effects.
	allowed := []string{"OnDelete", "Recreate", "InPlace"}
	got := map[string]string{}
	for _, c := range cc.Spec.ChildResources {
		key := c.APIVersion + "/" + c.Resource
		method := ""
		if c.UpdateStrategy != nil {
			method = c.UpdateStrategy.Method
		}
		if _, dup := got[key]; dup {
			t.Errorf("childResources lists %s twice", key)
		}
		got[key] = method
		if strings.HasPrefix(method, "Rolling") {
			t.Errorf("childResources %s: updateStrategy %s would call the hook concurrently", key, method)
		} else if !slices.Contains(allowed, method) {
			t.Errorf("childResources %s: updateStrategy.method %q, want one of %v (set explicitly)", key, method, allowed)
		}
	}
	if diff := cmp.Diff(wantMethods, got); diff != "" {
		t.Errorf("childResources update strategies (-want +got):\n%s", diff)
	}

	for hook, path := range map[string]string{"sync": "/sync", "finalize": "/finalize"} {
		h, ok := cc.Spec.Hooks[hook]
		if !ok || h.Webhook == nil {
			t.Errorf("hooks.%s.webhook is missing", hook)
			continue
		}
		if want := "http://etcd-hook.etcd-hook" + path; h.Webhook.URL != want {
			t.Errorf("hooks.%s.webhook.url %q, want %q", hook, h.Webhook.URL, want)
		}
		if h.Webhook.Timeout != "10s" {
			t.Errorf("hooks.%s.webhook.timeout %q, want 10s", hook, h.Webhook.Timeout)
		}
	}
}

// TestHookService checks that the hook URLs of the CompositeController reach
// the hook: Service etcd-hook in namespace etcd-hook, port 80, selecting the
// Deployment's Pods on their port 8080.
func TestHookService(t *testing.T) {
	var svc corev1.Service
	var dep appsv1.Deployment
	for _, f := range []struct {
		file string
		into any
	}{{"hook/service.yaml", &svc}, {"hook/deployment.yaml", &dep}} {
		docs := readDocuments(t, f.file)
		if len(docs) != 1 {
			t.Fatalf("%s: %d documents, want 1", f.file, len(docs))
		}
		if err := decodeStrict(docs[0], f.into); err != nil {
			t.Fatalf("%s: %v", f.file, err)
		}
	}
	if svc.Name != "etcd-hook" || svc.Namespace != "etcd-hook" {
		t.Errorf("Service %s/%s, want etcd-hook/etcd-hook", svc.Namespace, svc.Name)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 {
		t.Errorf("Service ports %+v, want the single port 80", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not select the Deployment's Pods (labels %v)", k, v, dep.Spec.Template.Labels)
		}
	}
	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment has %d containers, want 1", len(dep.Spec.Template.Spec.Containers))
	}
	c := dep.Spec.Template.Spec.Containers[0]
	target := svc.Spec.Ports[0].TargetPort
	found := false
	for _, p := range c.Ports {
		if (target.StrVal != "" && p.Name == target.StrVal) || (target.StrVal == "" && p.ContainerPort == target.IntVal) {
			found = p.ContainerPort == 8080
		}
	}
	if !found {
		t.Errorf("Service targetPort %s is not the container's port 8080 (%+v)", target.String(), c.Ports)
	}
	if !slices.Contains(c.Args, "--addr=:8080") {
		t.Errorf("container args %v, want --addr=:8080", c.Args)
	}
}

// TestKustomization checks that the top-level kustomization lists files that
// exist and every manifest but the examples, and that the hook image can be
// overridden through images:.
func TestKustomization(t *testing.T) {
	docs := readDocuments(t, kustomizationFile)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", kustomizationFile, len(docs))
	}
	var k struct {
		Resources []string `json:"resources"`
		Images    []struct {
			Name string `json:"name"`
		} `json:"images"`
	}
	b, _ := json.Marshal(docs[0].data)
	if err := json.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, f := range resourceFiles(t, ".", k.Resources) {
		listed[f] = true
	}
	for _, f := range manifestFiles(t) {
		// The HTTPS entry points build on the same directories, and
		// TestTLSOverlays checks what they render.
		if path.Base(f) == kustomizationFile || strings.HasPrefix(f, examplesDir+"/") || strings.HasPrefix(f, tlsDir+"/") {
			continue
		}
		// Snippets for Argo CD's and Flux's own objects, applied to
		// their installations (internal/gitopstest checks them).
		if strings.HasPrefix(f, "gitops/") {
			continue
		}
		// Optional Prometheus Operator objects, applied on their own and
		// kept out of this list on purpose (test/monitoring checks them).
		if strings.HasPrefix(f, "monitoring/") {
			continue
		}
		if !listed[f] {
			t.Errorf("%s is not listed in %s, nor in a directory it lists", f, kustomizationFile)
		}
	}

	var dep appsv1.Deployment
	depDocs := readDocuments(t, "hook/deployment.yaml")
	if len(depDocs) != 1 {
		t.Fatalf("hook/deployment.yaml: %d documents, want 1", len(depDocs))
	}
	if err := decodeStrict(depDocs[0], &dep); err != nil {
		t.Fatal(err)
	}
	for _, c := range dep.Spec.Template.Spec.Containers {
		name, _, _ := strings.Cut(c.Image, ":")
		if !slices.ContainsFunc(k.Images, func(i struct {
			Name string `json:"name"`
		}) bool {
			return i.Name == name
		}) {
			t.Errorf("image %s of container %s cannot be overridden: no images: entry named %s", c.Image, c.Name, name)
		}
	}
}

// resourceFiles lists the files a kustomization's resources name, relative
// to manifests/: a directory stands for the resources of its own
// kustomization.yaml.
func resourceFiles(t *testing.T, dir string, resources []string) []string {
	t.Helper()
	var files []string
	for _, r := range resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			t.Errorf("resource %s of %s: %v", r, filepath.Join(dir, kustomizationFile), err)
			continue
		}
		if !st.IsDir() {
			files = append(files, filepath.ToSlash(filepath.Clean(p)))
			continue
		}
		docs := readDocuments(t, filepath.Join(p, kustomizationFile))
		if len(docs) != 1 {
			t.Fatalf("%s: %d documents, want 1", filepath.Join(p, kustomizationFile), len(docs))
		}
		sub, _ := lookup(docs[0].data, "resources").([]any)
		var names []string
		for _, s := range sub {
			name, _ := s.(string)
			names = append(names, name)
		}
		files = append(files, resourceFiles(t, p, names)...)
	}
	return files
}
