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
