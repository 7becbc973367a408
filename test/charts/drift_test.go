package charts

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
)

// TestDefaultValuesRenderManifests: the chart with its default values (and
// its CRDs) renders exactly the objects of kubectl kustomize manifests/, so
// a Helm install and kubectl apply -k manifests/ never diverge: both have
// Metacontroller call the hook over HTTPS. Nothing is normalized: the
// chart adds no label or annotation of its own. The one object only the
// chart has is the serving certificate it issues (tls.generate), which
// manifests/tls/issue-certificate.sh issues for kustomize.
func TestDefaultValuesRenderManifests(t *testing.T) {
	want := kustomize(t, "manifests/")
	got, err := helmTemplateAsIs(t, "--include-crds")
	if err != nil {
		t.Fatal(err)
	}
	issued := got.only(t, "Secret", "etcd-hook-tls")
	checkIssuedCertificate(t, issued, "etcd-hook.etcd-hook.svc")
	if diff := diffObjects(want, got.without(objects{objectKey(issued): issued})); diff != "" {
		t.Errorf("helm template --include-crds %s differs from kubectl kustomize manifests/ (-kustomize +helm):\n%s", chartDir, diff)
	}
	// A kustomization that lost its resources would make both empty.
	for _, kind := range []string{"CustomResourceDefinition", "Deployment", "CompositeController"} {
		if len(got.ofKind(kind)) == 0 {
			t.Errorf("no %s rendered: %s", kind, strings.Join(got.keys(), ", "))
		}
	}
	for key, cc := range got.ofKind("CompositeController") {
		hooks, _ := lookup(cc, "spec", "hooks").(map[string]any)
		for name := range hooks {
			if url, _ := lookup(cc, "spec", "hooks", name, "webhook", "url").(string); !strings.HasPrefix(url, "https://etcd-hook.etcd-hook.svc:443/") {
				t.Errorf("%s: hooks.%s.webhook.url %q: the default install must call the hook over HTTPS", key, name, url)
			}
		}
		if lookup(cc, "spec", "endpointConfigs") == nil {
			t.Errorf("%s: no endpointConfigs: nothing verifies the hook's certificate", key)
		}
	}
}

// TestPlainHTTPIsTheOptOut: tls.enabled=false renders what the explicit
// opt-out manifests/plain-http renders, and nothing of HTTPS.
func TestPlainHTTPIsTheOptOut(t *testing.T) {
	want := kustomize(t, "manifests/plain-http")
	got := helmTemplate(t, "--set", "tls.enabled=false")
	if diff := diffObjects(want, got); diff != "" {
		t.Errorf("helm template --set tls.enabled=false differs from kubectl kustomize manifests/plain-http (-kustomize +helm):\n%s", diff)
	}
	if len(got.ofKind("Secret")) != 0 {
		t.Errorf("plain HTTP issued a Secret: %v", got.ofKind("Secret").keys())
	}
}

// checkIssuedCertificate: the Secret holds a CA and a certificate for
// host that it signed, with the certificate's key.
func checkIssuedCertificate(t *testing.T, secret map[string]any, host string) {
	t.Helper()
	get := func(key string) []byte {
		s, _ := lookup(secret, "data", key).(string)
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) == 0 {
			t.Fatalf("Secret key %s: %q (%v)", key, s, err)
		}
		return b
	}
	leaf, err := tlstest.CheckServing(get("ca.crt"), get("tls.crt"), get("tls.key"), host)
	if err != nil {
		t.Errorf("the issued certificate: %v", err)
	}
	if leaf == nil {
		return
	}
	if left := time.Until(leaf.NotAfter); left < 9*365*24*time.Hour {
		t.Errorf("the issued certificate expires in %s, want about ten years", left.Round(time.Hour))
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
