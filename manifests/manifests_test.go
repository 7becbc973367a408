// Package manifests_test checks the YAML under manifests/: that the CRD is
// what controller-gen makes of api/ today, that every manifest parses and
// uses only fields its type knows, and the invariants of the Metacontroller
// wiring that the hook's correctness depends on.
package manifests_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const (
	crdDir  = "crd"
	crdFile = "crd/etcd.database.coreos.com_etcdclusters.yaml"

	compositeControllerFile = "metacontroller/compositecontroller.yaml"
	kustomizationFile       = "kustomization.yaml"
	examplesDir             = "examples"
	tlsDir                  = "tls"
)

// controllerGen returns bin/controller-gen, building it with make (the
// pinned version, from tools/controller-gen) when it is missing, and checks
// that it is the version tools/controller-gen/go.mod pins.
func controllerGen(t *testing.T, root string) string {
	t.Helper()
	bin := testenv.BinaryPath(t, testenv.ControllerGen)
	if _, err := os.Stat(bin); err != nil {
		if _, err := exec.LookPath("make"); err != nil {
			t.Fatalf("%s is missing and make is not installed to build it: %v", bin, err)
		}
		cmd := exec.Command("make", "bin/controller-gen")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make bin/controller-gen: %v\n%s", err, out)
		}
	}

	pinned := testenv.PinnedVersion(t, "tools/controller-gen", "sigs.k8s.io/controller-tools")
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	if got := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "Version:")); got != pinned {
		t.Fatalf("%s is %s but tools/controller-gen/go.mod pins %s; delete it and run make bin/controller-gen", bin, got, pinned)
	}
	return bin
}

// TestCRDUpToDate regenerates the CRD from api/ and compares it with the
// checked-in copy: a marker edited without "make manifests" fails here.
func TestCRDUpToDate(t *testing.T) {
	root := testenv.ModuleRoot(t)
	gen := controllerGen(t, root)
	out := t.TempDir()
	cmd := exec.Command(gen, "crd", "paths=./api/...", "output:crd:artifacts:config="+out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}

	generated := yamlFiles(t, out)
	checkedIn := yamlFiles(t, crdDir)
	if len(generated) == 0 {
		t.Fatal("controller-gen generated no CRD")
	}
	for name, want := range generated {
		got, ok := checkedIn[name]
		if !ok {
			t.Errorf("manifests/crd/%s is missing; run make manifests", name)
			continue
		}
		if diff := cmp.Diff(strings.Split(want, "\n"), strings.Split(got, "\n")); diff != "" {
			t.Errorf("manifests/crd/%s is stale; run make manifests (-want generated from api/, +got checked in):\n%s", name, diff)
		}
	}
	for name := range checkedIn {
		if _, ok := generated[name]; !ok {
			t.Errorf("manifests/crd/%s is not generated from api/ any more; delete it", name)
		}
	}
}

// yamlFiles reads the *.yaml files directly in dir, by base name.
func yamlFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = string(b)
	}
	return files
}

// document is one YAML document of a manifest file, as generic JSON-like
// data (map[string]any, []any, scalars).
type document struct {
	file  string
	index int
	data  map[string]any
}

func (d document) String() string { return fmt.Sprintf("%s#%d", d.file, d.index) }

func (d document) str(path ...string) string {
	s, _ := lookup(d.data, path...).(string)
	return s
}

// lookup follows map keys; nil when any of them is absent.
func lookup(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// readDocuments parses every document of a YAML file; empty documents
// (comments only) are skipped.
func readDocuments(t *testing.T, file string) []document {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return parseDocuments(t, file, b)
}

// parseDocuments parses every document of YAML that came from file (a
// name for messages).
func parseDocuments(t *testing.T, file string, b []byte) []document {
	t.Helper()
	var docs []document
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for i := 0; ; i++ {
		var raw any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		if raw == nil {
			continue
		}
		v, err := jsonish(raw)
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: document %d is a %T, not a mapping", file, i, v)
		}
		docs = append(docs, document{file: filepath.ToSlash(file), index: i, data: m})
	}
	return docs
}

// jsonish turns what yaml.v2 decodes (maps keyed by any) into what
// encoding/json handles (maps keyed by string).
func jsonish(v any) (any, error) {
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("mapping key %v is a %T, not a string", k, k)
			}
			c, err := jsonish(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ks, err)
			}
			m[ks] = c
		}
		return m, nil
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			c, err := jsonish(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			s[i] = c
		}
		return s, nil
	default:
		return v, nil
	}
}

// decodeStrict decodes a document into a typed object, rejecting fields the
// type does not have (what kubectl's server-side field validation would
// reject or drop).
func decodeStrict(d document, into any) error {
	b, err := json.Marshal(d.data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// manifestFiles lists every YAML file under manifests/, sorted.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no YAML files under manifests/")
	}
	return files
}

// TestManifestsParse parses every YAML document under manifests/ and, for
// the kinds whose Go types are at hand, decodes it strictly.
func TestManifestsParse(t *testing.T) {
	typed := map[string]func() any{
		"v1/Namespace":                                    func() any { return &corev1.Namespace{} },
		"v1/ServiceAccount":                               func() any { return &corev1.ServiceAccount{} },
		"v1/Service":                                      func() any { return &corev1.Service{} },
		"apps/v1/Deployment":                              func() any { return &appsv1.Deployment{} },
		"policy/v1/PodDisruptionBudget":                   func() any { return &policyv1.PodDisruptionBudget{} },
		"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
		"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
		v1beta2.APIVersion + "/" + v1beta2.Kind:           func() any { return &v1beta2.EtcdCluster{} },
	}
	for _, file := range manifestFiles(t) {
		docs := readDocuments(t, file)
		if len(docs) == 0 {
			t.Errorf("%s: no YAML documents", file)
		}
		for _, d := range docs {
			apiVersion, kind := d.str("apiVersion"), d.str("kind")
			if apiVersion == "" || kind == "" {
				t.Errorf("%s: apiVersion %q and kind %q must both be set", d, apiVersion, kind)
				continue
			}
			if kind == "Kustomization" || kind == "Component" {
				continue
			}
			if d.str("metadata", "name") == "" {
				t.Errorf("%s: %s without metadata.name", d, kind)
			}
			if newObj, ok := typed[apiVersion+"/"+kind]; ok {
				if err := decodeStrict(d, newObj()); err != nil {
					t.Errorf("%s: %s %s: %v", d, apiVersion, kind, err)
				}
			}
		}
	}
}

// TestExamples checks that the examples are EtcdClusters the API accepts,
// and that the CoreOS seed example is exactly the seed.
func TestExamples(t *testing.T) {
	want := map[string]struct {
		name, version string
		size          int
	}{
		"example-etcd-cluster.yaml":       {"example-etcd-cluster", "3.2.13", 3},
		"example-tls-cluster.yaml":        {"example", "3.2.13", 3},
		"example-auto-tls-cluster.yaml":   {"example-auto-tls", "", 3},
		"example-auth-cluster.yaml":       {"example-auth", "", 3},
		"example-pod-policy.yaml":         {"example-pod-policy", "3.7.3", 3},
		"example-persistent-cluster.yaml": {"example-persistent-cluster", "3.7.3", 3},
		"example-etcd-settings.yaml":      {"example-etcd-settings", "3.7.3", 3},
	}
	paths, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range paths {
		base := filepath.Base(p)
		seen[base] = true
		docs := readDocuments(t, p)
		if len(docs) != 1 {
			t.Errorf("%s: %d documents, want 1", p, len(docs))
			continue
		}
		d := docs[0]
		if got := d.str("apiVersion"); got != v1beta2.APIVersion {
			t.Errorf("%s: apiVersion %q, want %q", p, got, v1beta2.APIVersion)
		}
		if d.str("kind") == v1beta2.KindBackup {
			checkBackupExample(t, p, d)
			continue
		}
		if d.str("kind") == v1beta2.KindRestore {
			checkRestoreExample(t, p, d)
			continue
		}
		if got := d.str("kind"); got != v1beta2.Kind {
			t.Errorf("%s: kind %q, want %q", p, got, v1beta2.Kind)
		}
		var c v1beta2.EtcdCluster
		if err := decodeStrict(d, &c); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if c.Spec.Size < v1beta2.MinSize || c.Spec.Size > v1beta2.MaxSize {
			t.Errorf("%s: spec.size %d is outside %d..%d", p, c.Spec.Size, v1beta2.MinSize, v1beta2.MaxSize)
		}
		if w, ok := want[base]; ok {
			if c.Name != w.name || c.Spec.Version != w.version || c.Spec.Size != w.size {
				t.Errorf("%s: name %q, version %q, size %d; want %q, %q, %d",
					p, c.Name, c.Spec.Version, c.Spec.Size, w.name, w.version, w.size)
			}
		}
		if c.Spec.Pod != nil {
			for k := range c.Spec.Pod.Labels {
				if k == "app" || strings.HasPrefix(k, "etcd_") {
					t.Errorf("%s: spec.pod.labels uses the reserved label %q", p, k)
				}
			}
		}
	}
	for base := range want {
		if !seen[base] {
			t.Errorf("examples/%s is missing", base)
		}
	}
	for _, base := range []string{"backup_cr.yaml", "periodic_backup_cr.yaml"} {
		if !seen[base] {
			t.Errorf("examples/%s (the CoreOS backup examples) is missing", base)
		}
	}

	// The seed is the CoreOS operator's own example, unchanged: nothing in
	// spec but size and version.
	seed := readDocuments(t, filepath.Join(examplesDir, "example-etcd-cluster.yaml"))
	if len(seed) == 1 {
		spec, _ := lookup(seed[0].data, "spec").(map[string]any)
		keys := make([]string, 0, len(spec))
		for k := range spec {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if diff := cmp.Diff([]string{"size", "version"}, keys); diff != "" {
			t.Errorf("example-etcd-cluster.yaml: spec fields (-want +got):\n%s", diff)
		}
	}
}

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

// TestCRDShape guards the parts of the generated CRD that users and the
// hook rely on, so that a marker change that drops one fails by name.
func TestCRDShape(t *testing.T) {
	docs := readDocuments(t, crdFile)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", crdFile, len(docs))
	}
	crd := docs[0]
	if got := crd.str("metadata", "name"); got != "etcdclusters."+v1beta2.Group {
		t.Errorf("name %q", got)
	}
	if names, _ := lookup(crd.data, "spec", "names", "shortNames").([]any); !slices.Contains(names, any("etcd")) {
		t.Errorf("shortNames %v, want etcd among them", names)
	}
	versions, _ := lookup(crd.data, "spec", "versions").([]any)
	if len(versions) != 1 {
		t.Fatalf("%d versions, want 1", len(versions))
	}
	v := versions[0]
	if lookup(v, "name") != v1beta2.Version || lookup(v, "served") != true || lookup(v, "storage") != true {
		t.Errorf("version %v served %v storage %v, want %s served and stored", lookup(v, "name"), lookup(v, "served"), lookup(v, "storage"), v1beta2.Version)
	}
	if _, ok := lookup(v, "subresources", "status").(map[string]any); !ok {
		t.Error("the status subresource is not enabled")
	}
	var columns []string
	cols, _ := lookup(v, "additionalPrinterColumns").([]any)
	for _, c := range cols {
		name, _ := lookup(c, "name").(string)
		columns = append(columns, strings.ToUpper(name))
	}
	if diff := cmp.Diff([]string{"SIZE", "READY", "VERSION", "PHASE", "AGE"}, columns); diff != "" {
		t.Errorf("printer columns (-want +got):\n%s", diff)
	}

	schema := lookup(v, "schema", "openAPIV3Schema")
	spec := lookup(schema, "properties", "spec")
	if lookup(spec, "x-kubernetes-preserve-unknown-fields") != nil {
		t.Error("spec must not preserve unknown fields: they are pruned on purpose")
	}
	if lookup(schema, "x-kubernetes-preserve-unknown-fields") != nil {
		t.Error("the root must not preserve unknown fields")
	}
	size := lookup(spec, "properties", "size")
	if lookup(size, "type") != "integer" || lookup(size, "minimum") != v1beta2.MinSize || lookup(size, "maximum") != v1beta2.MaxSize {
		t.Errorf("spec.size schema %v, want an integer from %d to %d", size, v1beta2.MinSize, v1beta2.MaxSize)
	}
	if got := lookup(spec, "properties", "repository", "default"); got != v1beta2.DefaultRepository {
		t.Errorf("spec.repository default %v, want %s", got, v1beta2.DefaultRepository)
	}
	if got := lookup(spec, "properties", "version", "default"); got != v1beta2.DefaultVersion {
		t.Errorf("spec.version default %v, want %s", got, v1beta2.DefaultVersion)
	}
	versionRules, _ := lookup(spec, "properties", "version", "x-kubernetes-validations").([]any)
	if len(versionRules) == 0 {
		t.Error("spec.version has no CEL rule requiring a semantic version")
	}
	rules, _ := lookup(spec, "x-kubernetes-validations").([]any)
	if !slices.ContainsFunc(rules, func(r any) bool {
		rule, _ := lookup(r, "rule").(string)
		return strings.Contains(rule, "pod.labels") && strings.Contains(rule, "etcd_")
	}) {
		t.Errorf("spec has no CEL rule reserving the labels app and etcd_*: %v", rules)
	}
	if lookup(schema, "properties", "status", "properties", "observedGeneration") == nil {
		t.Error("status.observedGeneration, which Metacontroller writes, is not in the schema and would be pruned")
	}
}

// checkBackupExample: an EtcdBackup example decodes strictly, passes the
// hook's validation, and uses the CoreOS operator's fields only.
func checkBackupExample(t *testing.T, p string, d document) {
	t.Helper()
	var b v1beta2.EtcdBackup
	if err := decodeStrict(d, &b); err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	if errs := b.Validate(); len(errs) > 0 {
		t.Errorf("%s: %v", p, errs.ToAggregate())
	}
	if base := filepath.Base(p); base != "backup_cr.yaml" && base != "periodic_backup_cr.yaml" {
		// This project's own examples (a continuous backup) use its fields.
		return
	}
	spec, _ := lookup(d.data, "spec").(map[string]any)
	for k := range spec {
		if !slices.Contains([]string{"etcdEndpoints", "storageType", "backupPolicy", "s3"}, k) {
			t.Errorf("%s: spec.%s is not a field of the CoreOS example", p, k)
		}
	}
}

// checkRestoreExample: the CoreOS restore_cr.yaml decodes, and, with its
// placeholders filled in, is a valid request named after its cluster.
func checkRestoreExample(t *testing.T, p string, d document) {
	t.Helper()
	var r v1beta2.EtcdRestore
	if err := decodeStrict(d, &r); err != nil {
		t.Errorf("%s: %v", p, err)
		return
	}
	switch {
	case r.Spec.Backup != nil:
		// A restore from an EtcdBackup by name: no placeholders.
	case r.Spec.S3 == nil:
		t.Errorf("%s: no spec.s3", p)
		return
	default:
		r.Spec.S3.Path, r.Spec.S3.AWSSecret = "mybucket/etcd.backup", "aws"
	}
	if errs := r.Validate(); len(errs) > 0 {
		t.Errorf("%s: %v", p, errs.ToAggregate())
	}
}
