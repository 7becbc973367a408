package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// TestDefaultValuesRenderManifests: the chart with its default values (and
// its CRDs) renders exactly the objects of kubectl kustomize manifests/, so
// a Helm install and kubectl apply -k manifests/ never diverge. Nothing is
// normalized: the chart adds no label or annotation of its own.
func TestDefaultValuesRenderManifests(t *testing.T) {
	want := kustomize(t, "manifests/")
	got := helmTemplate(t, "--include-crds")
	if diff := diffObjects(want, got); diff != "" {
		t.Errorf("helm template --include-crds %s differs from kubectl kustomize manifests/ (-kustomize +helm):\n%s", chartDir, diff)
	}
	// A kustomization that lost its resources would make both empty.
	for _, kind := range []string{"CustomResourceDefinition", "Deployment", "CompositeController"} {
		if len(got.ofKind(kind)) == 0 {
			t.Errorf("no %s rendered: %s", kind, strings.Join(got.keys(), ", "))
		}
	}
}

// TestTLSValuesRenderTLSOverlays: the HTTPS values render what the HTTPS
// kustomizations render. Those leave the CRDs out (kustomize refuses an
// overlay that includes manifests/, where they are), and so does helm
// template without --include-crds.
func TestTLSValuesRenderTLSOverlays(t *testing.T) {
	for _, tc := range []struct {
		name, overlay string
		sets          []string
		reason        string
	}{
		{
			name: "secret of one's own", overlay: "manifests/tls",
			sets:   []string{"--set", "tls.enabled=true"},
			reason: "the Secret etcd-hook-tls mounted as a directory, HTTPS on 8443 and Service port 443, every webhook on https with the Secret's CA",
		},
		{
			name: "cert-manager", overlay: "manifests/tls/cert-manager",
			sets:   []string{"--set", "tls.enabled=true", "--set", "tls.certManager.enabled=true"},
			reason: "the same, and the Issuers and Certificates that have cert-manager issue the Secret",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := kustomize(t, tc.overlay)
			got := helmTemplate(t, tc.sets...)
			if diff := diffObjects(want, got); diff != "" {
				t.Errorf("%s: helm template %s differs from kubectl kustomize %s (-kustomize +helm):\n%s",
					tc.reason, strings.Join(tc.sets, " "), tc.overlay, diff)
			}
		})
	}
}

// TestCRDCopies: Helm reads nothing outside the chart, so charts/etcd-hook/
// crds holds copies of manifests/crd, which controller-gen writes. They
// must stay byte for byte the same ("make chart-crds" copies them).
func TestCRDCopies(t *testing.T) {
	root := testenv.ModuleRoot(t)
	compareDirs(t, filepath.Join(root, "manifests", "crd"), filepath.Join(root, chartDir, "crds"), "make chart-crds")
}

// compareDirs fails unless dir copy holds the same *.yaml files as dir
// source, byte for byte.
func compareDirs(t *testing.T, source, copy, fix string) {
	t.Helper()
	compareFiles(t, yamlFiles(t, source), yamlFiles(t, copy), source, copy, fix)
}

// compareFiles fails unless the files of copy (by base name) are those of
// source, byte for byte; fix says how to make them so.
func compareFiles(t *testing.T, want, got map[string]string, source, copy, fix string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("no *.yaml in %s", source)
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s/%s has no copy in %s; run %s", source, name, copy, fix)
			continue
		}
		if diff := cmp.Diff(strings.Split(w, "\n"), strings.Split(g, "\n")); diff != "" {
			t.Errorf("%s/%s differs from %s/%s; run %s (-source +copy):\n%s", copy, name, source, name, fix, diff)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s/%s is not in %s any more; run %s", copy, name, source, fix)
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
