package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// prometheusOperator is the Prometheus Operator release whose CRDs the
// monitoring objects are checked against: its Go module carries them
// (example/prometheus-operator-crd), so the Go module proxy is the only
// source needed.
const prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// operatorCRDs downloads the Prometheus Operator's module (once; the module
// cache keeps it) and returns the openAPIV3Schema of version v1 of each
// kind.
func operatorCRDs(t *testing.T) map[string]map[string]any {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", prometheusOperator)
	// Outside any module: nothing of this repository's go.mod is involved.
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Error != "" || mod.Dir == "" {
		testenv.SkipOrFail(t, "go mod download %s: %v %s %s", prometheusOperator, err, mod.Error, stderr.String())
	}
	files, err := filepath.Glob(filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs under %s/example/prometheus-operator-crd: %v", mod.Dir, err)
	}
	schemas := map[string]map[string]any{}
	for _, f := range files {
		var crd struct {
			Spec struct {
				Names    struct{ Kind string } `yaml:"names"`
				Versions []struct {
					Name   string `yaml:"name"`
					Schema struct {
						OpenAPIV3Schema any `yaml:"openAPIV3Schema"`
					} `yaml:"schema"`
				} `yaml:"versions"`
			} `yaml:"spec"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Name == "v1" {
				schemas[crd.Spec.Names.Kind] = jsonish(v.Schema.OpenAPIV3Schema).(map[string]any)
			}
		}
	}
	return schemas
}

// jsonish turns what go.yaml.in/yaml/v2 decodes into what encoding/json
// would: maps keyed by strings.
func jsonish(v any) any {
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonish(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = jsonish(e)
		}
	}
	return v
}

// TestObjectsMatchOperatorSchemas: every monitoring object is valid under
// its CRD's schema as the Prometheus Operator ships it: no field the kind
// does not have (which the API server would drop, or refuse under strict
// field validation), the types, enums, patterns and required fields it
// declares. The CRDs' CEL rules are not evaluated. The dashboard's
// ConfigMap is decoded strictly as a core ConfigMap.
func TestObjectsMatchOperatorSchemas(t *testing.T) {
	schemas := operatorCRDs(t)
	files, err := filepath.Glob(filepath.Join(testenv.ModuleRoot(t), monitoringDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var raw any
		if err := yaml.Unmarshal(b, &raw); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		obj, _ := jsonish(raw).(map[string]any)
		kind, _ := obj["kind"].(string)
		kinds = append(kinds, kind)
		name := filepath.Base(f)
		if kind == "ConfigMap" {
			j, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&corev1.ConfigMap{}); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		schema, ok := schemas[kind]
		if !ok {
			t.Errorf("%s: kind %q has no CRD in %s", name, kind, prometheusOperator)
			continue
		}
		if obj["apiVersion"] != "monitoring.coreos.com/v1" {
			t.Errorf("%s: apiVersion %v, want monitoring.coreos.com/v1", name, obj["apiVersion"])
		}
		for _, problem := range validate(obj, schema, kind) {
			t.Errorf("%s: %s", name, problem)
		}
	}
	want := []string{"ConfigMap", "PodMonitor", "PrometheusRule", "ServiceMonitor"}
	if slices.Sort(kinds); !slices.Equal(kinds, want) {
		t.Errorf("%s holds the kinds %v, want one each of %v", monitoringDir, kinds, want)
	}
}

// validate walks v along a structural OpenAPI v3 schema (what CRDs use)
// and reports what the API server's schema validation would.
func validate(v any, schema map[string]any, path string) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, path+": "+fmt.Sprintf(format, args...))
	}
	if b, _ := schema["x-kubernetes-int-or-string"].(bool); b {
		switch v.(type) {
		case int, string:
		default:
			add("%v is neither an integer nor a string", v)
		}
		return problems
	}
	switch schema["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			add("%v is not an object", v)
			return problems
		}
		props, _ := schema["properties"].(map[string]any)
		additional, _ := schema["additionalProperties"].(map[string]any)
		preserve, _ := schema["x-kubernetes-preserve-unknown-fields"].(bool)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			// The API server checks an object's metadata itself; a CRD's
			// schema says only that it is an object.
			if k == "metadata" && !strings.Contains(path, ".") {
				continue
			}
			switch p, ok := props[k].(map[string]any); {
			case ok:
				problems = append(problems, validate(m[k], p, path+"."+k)...)
			case additional != nil:
				problems = append(problems, validate(m[k], additional, path+"."+k)...)
			case !preserve:
				add("unknown field %q", k)
			}
		}
		required, _ := schema["required"].([]any)
		for _, r := range required {
			if _, ok := m[r.(string)]; !ok {
				add("missing required field %q", r)
			}
		}
	case "array":
		s, ok := v.([]any)
		if !ok {
			add("%v is not an array", v)
			return problems
		}
		items, _ := schema["items"].(map[string]any)
		for i, e := range s {
			problems = append(problems, validate(e, items, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			add("%v is not a string", v)
			return problems
		}
		if enum, ok := schema["enum"].([]any); ok && !slices.Contains(enum, any(s)) {
			add("%q is not one of %v", s, enum)
		}
		if p, ok := schema["pattern"].(string); ok {
			if re, err := regexp.Compile(p); err == nil && !re.MatchString(s) {
				add("%q does not match %s", s, p)
			}
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			add("%v is not a boolean", v)
		}
	case "integer":
		if _, ok := v.(int); !ok {
			add("%v is not an integer", v)
		}
	case "number":
		switch v.(type) {
		case int, float64:
		default:
			add("%v is not a number", v)
		}
	}
	return problems
}
