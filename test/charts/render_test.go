package charts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v2"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const (
	chartDir = "charts/etcd-hook"
	// The release name the tests render with; the chart's object names do
	// not depend on it.
	releaseName = "etcd-hook"
)

// helmBin returns bin/helm once it is known to be the release
// tools/helm/go.mod pins.
func helmBin(t testing.TB) string {
	t.Helper()
	bin := testenv.Binary(t, testenv.Helm)
	want := testenv.PinnedVersion(t, "tools/helm", "helm.sh/helm/v3")
	out, err := exec.Command(bin, "version", "--template", "{{.Version}}").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("%s is %s but tools/helm/go.mod pins %s: delete it and run %q", bin, got, want, testenv.BuildHint(testenv.Helm))
	}
	return bin
}

// run runs bin from the module root with a clean Helm environment: no
// repositories, caches or plugins of the machine's user.
func run(t testing.TB, bin string, args ...string) (stdout []byte, err error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = testenv.ModuleRoot(t)
	home := t.TempDir()
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"HELM_CACHE_HOME=" + filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"),
		"LANG=C",
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return out.Bytes(), nil
}

// helmTemplate renders the chart with the release name and args (--set,
// --include-crds, --api-versions, --namespace ...).
func helmTemplate(t testing.TB, args ...string) objects {
	t.Helper()
	out, err := helmTemplateErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// helmTemplateErr is helmTemplate that returns Helm's error instead of
// failing, for the values that must be refused.
func helmTemplateErr(t testing.TB, args ...string) (objects, error) {
	t.Helper()
	// Without the serving certificate the chart issues by default: it
	// holds random bytes, so two renderings never agree on it, and
	// kustomize renders none (manifests/tls/issue-certificate.sh issues
	// it). TestDefaultValuesRenderManifests checks it; a caller's own
	// --set tls.generate comes later and wins.
	return helmTemplateAsIs(t, append([]string{"--set", "tls.generate=false"}, args...)...)
}

// helmTemplateAsIs is helm template with exactly args.
func helmTemplateAsIs(t testing.TB, args ...string) (objects, error) {
	t.Helper()
	full := append([]string{"template", releaseName, chartDir}, args...)
	out, err := run(t, helmBin(t), full...)
	if err != nil {
		return nil, err
	}
	return decode(t, "helm "+strings.Join(full, " "), out), nil
}

// kustomize renders a kustomization directory with bin/kubectl.
func kustomize(t testing.TB, dir string) objects {
	t.Helper()
	bin := testenv.Binary(t, testenv.Kubectl)
	out, err := run(t, bin, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, "kubectl kustomize "+dir, out)
}

// objects are rendered Kubernetes objects by key (see objectKey), each as
// generic JSON-like data (map[string]any, []any, scalars).
type objects map[string]map[string]any

// objectKey names an object by apiVersion, kind, namespace and name.
func objectKey(obj map[string]any) string {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	ns, _ := lookup(obj, "metadata", "namespace").(string)
	name, _ := lookup(obj, "metadata", "name").(string)
	if ns != "" {
		return fmt.Sprintf("%s %s %s/%s", apiVersion, kind, ns, name)
	}
	return fmt.Sprintf("%s %s %s", apiVersion, kind, name)
}

// keys lists the objects' keys, sorted.
func (o objects) keys() []string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ofKind returns the objects of one kind.
func (o objects) ofKind(kind string) objects {
	out := objects{}
	for k, obj := range o {
		if obj["kind"] == kind {
			out[k] = obj
		}
	}
	return out
}

// without returns o less the objects whose keys are in other.
func (o objects) without(other objects) objects {
	out := objects{}
	for k, obj := range o {
		if _, ok := other[k]; !ok {
			out[k] = obj
		}
	}
	return out
}

// only returns the single object of kind and name, failing otherwise.
func (o objects) only(t testing.TB, kind, name string) map[string]any {
	t.Helper()
	var found []map[string]any
	for _, obj := range o {
		if obj["kind"] == kind && lookup(obj, "metadata", "name") == name {
			found = append(found, obj)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects %s/%s rendered, want 1 (rendered: %s)", len(found), kind, name, strings.Join(o.keys(), ", "))
	}
	return found[0]
}

// decode parses every YAML document of a rendering (src names it in
// messages); documents that hold only comments are skipped, and two
// objects with one key fail the test.
func decode(t testing.TB, src string, b []byte) objects {
	t.Helper()
	objs := objects{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for i := 0; ; i++ {
		var raw any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", src, i, err)
		}
		if raw == nil {
			continue
		}
		v, err := jsonish(raw)
		if err != nil {
			t.Fatalf("%s: document %d: %v", src, i, err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: document %d is a %T, not a mapping", src, i, v)
		}
		key := objectKey(obj)
		if _, dup := objs[key]; dup {
			t.Fatalf("%s: %s rendered twice", src, key)
		}
		objs[key] = obj
	}
	return objs
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

// diffObjects reports, object by object, how got differs from want: the
// objects only one of them has, then a cmp.Diff (-want +got) of each object
// both have that differs. Empty when they are the same.
func diffObjects(want, got objects) string {
	var b strings.Builder
	for _, k := range want.keys() {
		if _, ok := got[k]; !ok {
			fmt.Fprintf(&b, "- %s (missing)\n", k)
		}
	}
	for _, k := range got.keys() {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "+ %s (not expected)\n", k)
		}
	}
	for _, k := range want.keys() {
		g, ok := got[k]
		if !ok {
			continue
		}
		if diff := cmp.Diff(want[k], g); diff != "" {
			fmt.Fprintf(&b, "%s:\n%s", k, diff)
		}
	}
	return b.String()
}
