package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const (
	chartDir     = "charts/etcd-hook"
	chartRelease = "etcd-hook"
	// The namespace Helm keeps the release's record in; the hook's objects
	// go to the chart's namespace.name (etcd-hook).
	chartReleaseNamespace = "default"
	chartHookNamespace    = "etcd-hook"
	helmHint              = "make bin/helm"
	// helmTimeout bounds one helm invocation (install, upgrade, uninstall).
	helmTimeout = 2 * time.Minute
)

// chartTLS is the values of the HTTPS variant (manifests/tls).
var chartTLS = []string{"--set", "tls.enabled=true"}

// monitoringKinds are the kinds of the chart's monitoring objects, rendered
// only where the API server serves monitoring.coreos.com/v1.
var monitoringKinds = []string{"PodMonitor", "ServiceMonitor", "PrometheusRule"}

// monitoringAPIFile makes the API server serve monitoring.coreos.com/v1.
const monitoringAPIFile = "test/apiserver/testdata/monitoring-api.yaml"

// TestChart installs charts/etcd-hook on a real API server with a real
// Helm, with Metacontroller's CRDs installed first so that the
// CompositeControllers are validated against their schema. In order: an
// install, an upgrade to HTTPS and back, an upgrade once the Prometheus
// Operator's API is served (which brings the monitoring objects), and an
// uninstall, which keeps the CRDs and every EtcdCluster.
func TestChart(t *testing.T) {
	k, h := startChartKube(t)
	steps := []struct {
		name string
		fn   func(*testing.T, *kube, *helmClient)
	}{
		{"Install", testChartInstall},
		{"UpgradeKeepsHTTPS", testChartUpgradeKeepsHTTPS},
		{"UpgradeBackToHTTP", testChartUpgradeBackToHTTP},
		{"MonitoringAPIAppears", testChartMonitoring},
		{"Uninstall", testChartUninstall},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.fn(t, k, h) }) {
			t.Fatalf("step %s failed; the steps after it build on it", s.name)
		}
	}
}

// TestChartAdoptsKustomizeInstall: on an API server of its own, where
// kubectl apply -k manifests/ installed the hook and an EtcdCluster runs,
// the chart's README's two commands and helm install move the install to
// Helm without changing it.
func TestChartAdoptsKustomizeInstall(t *testing.T) {
	k, h := startChartKube(t)
	testChartAdopt(t, k, h)
}

// startChartKube starts an API server with Metacontroller's CRDs, and a
// Helm client for it.
func startChartKube(t *testing.T) (*kube, *helmClient) {
	t.Helper()
	crds := metacontrollerCRDs(t)
	helm := helmBin(t)
	start := time.Now()
	k := startKube(t)
	t.Logf("etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	k.mustKubectl(t, "", "apply", "--server-side", "--validate=strict", "-f", crds)
	k.mustKubectl(t, "", "wait", "--for=condition=Established", "--timeout=30s", "-f", crds)
	return k, &helmClient{bin: helm, k: k, home: t.TempDir()}
}

// helmBin returns bin/helm once it is known to be the release
// tools/helm/go.mod pins.
func helmBin(t *testing.T) string {
	t.Helper()
	bin := testenv.Binary(t, testenv.Helm)
	want := testenv.PinnedVersion(t, "tools/helm", "helm.sh/helm/v3")
	out, err := exec.Command(bin, "version", "--template", "{{.Version}}").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("%s is %s but tools/helm/go.mod pins %q: delete it and run %q", bin, got, want, testenv.BuildHint(testenv.Helm))
	}
	return bin
}

// helmClient runs bin/helm against the test's API server, with a Helm home
// of its own (no repositories, caches or plugins of the machine's user).
type helmClient struct {
	bin  string
	k    *kube
	home string
}

// run runs helm from the module root; a non-zero exit fails the test, and
// so does a warning from the API server (deprecated API, PodSecurity,
// unknown field), which client-go logs on stderr.
func (h *helmClient) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), helmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Dir = h.k.root
	cmd.Env = []string{
		"KUBECONFIG=" + h.k.kubeconfig,
		"HOME=" + h.home,
		"HELM_CACHE_HOME=" + filepath.Join(h.home, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(h.home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(h.home, "data"),
		"PATH=" + os.Getenv("PATH"),
		"LANG=C",
		"NO_PROXY=127.0.0.1", "no_proxy=127.0.0.1",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: append([]string{"(helm)"}, args...), stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		r.code = exit.ExitCode()
	default:
		t.Fatalf("helm %s: %v (timeout %v)\n%s", strings.Join(args, " "), err, helmTimeout, stderr.String())
	}
	if r.code != 0 {
		t.Fatal(r)
	}
	if strings.Contains(strings.ToLower(r.stderr), "warning") {
		t.Errorf("unexpected warning:\n%s", r)
	}
	return r
}

// template renders the chart as install and upgrade do, CRDs included.
func (h *helmClient) template(t *testing.T, values ...string) string {
	t.Helper()
	return h.run(t, append([]string{"template", chartRelease, chartDir, "--include-crds", "--namespace", chartReleaseNamespace}, values...)...).stdout
}

// manifest is what the release installed: rendered by Helm with what this
// API server says it serves (.Capabilities), CRDs left out.
func (h *helmClient) manifest(t *testing.T) string {
	t.Helper()
	return h.run(t, "get", "manifest", chartRelease, "--namespace", chartReleaseNamespace).stdout
}

// install and upgrade leave the release's objects as they are rendered
// (no --wait: nothing runs Pods here).
func (h *helmClient) install(t *testing.T, values ...string) (stdout string) {
	t.Helper()
	return h.run(t, append([]string{"install", chartRelease, chartDir, "--namespace", chartReleaseNamespace}, values...)...).stdout
}

func (h *helmClient) upgrade(t *testing.T, values ...string) {
	t.Helper()
	h.run(t, append([]string{"upgrade", chartRelease, chartDir, "--namespace", chartReleaseNamespace}, values...)...)
}

// rendered decodes a rendering with kubectl (a client-side dry run), one
// object after another.
func rendered(t *testing.T, k *kube, manifest string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	dec := json.NewDecoder(strings.NewReader(k.mustKubectl(t, manifest, "create", "--dry-run=client", "-o", "json", "-f", "-").stdout))
	for dec.More() {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("kubectl create --dry-run=client: %v", err)
		}
		objs = append(objs, obj)
	}
	if len(objs) == 0 {
		t.Fatal("the chart rendered nothing")
	}
	return objs
}

// live gets the stored version of each object of a rendering, by key.
func live(t *testing.T, k *kube, manifest string) map[string]map[string]any {
	t.Helper()
	var list struct {
		Items []map[string]any `json:"items"`
	}
	unmarshal(t, k.mustKubectl(t, manifest, "get", "-f", "-", "-o", "json").stdout, &list)
	stored := map[string]map[string]any{}
	for _, obj := range list.Items {
		stored[objectKey(obj)] = obj
	}
	return stored
}

// checkStoredAsRendered: every object the chart renders with values is
// stored, with every field as rendered (admission pruned or changed
// nothing, and Helm applied all of it).
func checkStoredAsRendered(t *testing.T, k *kube, h *helmClient, values ...string) map[string]map[string]any {
	t.Helper()
	manifest := h.template(t, values...)
	stored := live(t, k, manifest)
	for _, obj := range rendered(t, k, manifest) {
		key := objectKey(obj)
		if key == "Secret/etcd-hook-tls" {
			// Issued anew by each helm template (it sees no cluster);
			// servingSecret checks the stored one.
			delete(obj, "data")
		}
		got, ok := stored[key]
		if !ok {
			t.Errorf("%s is not stored", key)
			continue
		}
		for _, p := range notKept("", obj, got) {
			t.Errorf("%s: %s is not as rendered: the chart says %s, stored %s", key, p, jsonString(t, lookupPath(obj, p)), jsonString(t, lookupPath(got, p)))
		}
	}
	return stored
}

// testChartInstall: helm install with the default values, then every
// object as rendered, the CRDs established, and an example EtcdCluster
// accepted by them.
func testChartInstall(t *testing.T, k *kube, h *helmClient) {
	out := h.install(t)
	// NOTES.txt renders, and names the webhook URL: HTTPS by default.
	if want := "it calls the hook at https://etcd-hook.etcd-hook.svc:443"; !strings.Contains(out, want) {
		t.Errorf("helm install does not print %q:\n%s", want, out)
	}
	stored := checkStoredAsRendered(t, k, h)
	installedCert = servingSecret(t, k)
	syncOverTLS(t, k, installedCert)
	var kinds []string
	for key := range stored {
		kinds = append(kinds, strings.SplitN(key, "/", 2)[0])
	}
	for _, kind := range []string{"CustomResourceDefinition", "Namespace", "ServiceAccount", "Deployment", "Service",
		"PodDisruptionBudget", "ClusterRole", "ClusterRoleBinding", "CompositeController"} {
		if !slices.Contains(kinds, kind) {
			t.Errorf("no %s installed (installed: %s)", kind, strings.Join(slices.Sorted(slices.Values(kinds)), ", "))
		}
	}
	k.mustKubectl(t, "", "wait", "--for=condition=Established", "--timeout=30s", "crd/"+crdName)
	noWarnings(t, k.mustKubectl(t, "", "apply", "--validate=strict", "-n", chartReleaseNamespace,
		"-f", filepath.Join(examplesDir, seedExample)))
	// This API server does not serve the Prometheus Operator's API: Helm
	// found that out and rendered no monitoring object.
	checkReleaseIsTemplate(t, k, h)
}

// checkReleaseIsTemplate: what the release installed, which Helm rendered
// with the API server's discovery, is what helm template renders given
// args (values, and --api-versions for the APIs the test knows are
// served), object for object.
func checkReleaseIsTemplate(t *testing.T, k *kube, h *helmClient, args ...string) {
	t.Helper()
	installed := map[string]bool{}
	for _, obj := range rendered(t, k, h.manifest(t)) {
		installed[objectKey(obj)] = true
	}
	templated := map[string]bool{}
	manifest := h.run(t, append([]string{"template", chartRelease, chartDir, "--namespace", chartReleaseNamespace}, args...)...).stdout
	for _, obj := range rendered(t, k, manifest) {
		templated[objectKey(obj)] = true
	}
	if diff := cmp.Diff(templated, installed); diff != "" {
		t.Errorf("the release's objects are not those helm template %s renders (-template +release):\n%s", strings.Join(args, " "), diff)
	}
}

// testChartMonitoring: once the API server serves monitoring.coreos.com/v1,
// a helm upgrade (the release's values, unchanged) finds it and installs
// the PodMonitor, ServiceMonitor and PrometheusRule in the hook's
// namespace, as helm template --api-versions monitoring.coreos.com/v1
// renders them; nothing else changes.
func testChartMonitoring(t *testing.T, k *kube, h *helmClient) {
	k.mustKubectl(t, "", "apply", "--server-side", "--validate=strict", "-f", monitoringAPIFile)
	k.mustKubectl(t, "", "wait", "--for=condition=Established", "--timeout=30s", "-f", monitoringAPIFile)
	before := resourceVersionOf(t, k, chartReleaseNamespace, "etcd/"+seedName)

	h.run(t, "upgrade", chartRelease, chartDir, "--namespace", chartReleaseNamespace, "--reuse-values")
	withAPI := []string{"--set", "tls.enabled=false", "--api-versions", "monitoring.coreos.com/v1"}
	checkReleaseIsTemplate(t, k, h, withAPI...)
	stored := checkStoredAsRendered(t, k, h, withAPI...)
	for _, kind := range monitoringKinds {
		found := false
		for key, obj := range stored {
			if strings.HasPrefix(key, kind+"/") {
				found = true
				if ns := lookupPath(obj, ".metadata.namespace"); ns != chartHookNamespace {
					t.Errorf("%s is in namespace %v, want the hook's, %s", key, ns, chartHookNamespace)
				}
			}
		}
		if !found {
			t.Errorf("no %s installed once the API server serves monitoring.coreos.com/v1", kind)
		}
	}
	if after := resourceVersionOf(t, k, chartReleaseNamespace, "etcd/"+seedName); after != before {
		t.Errorf("the upgrade changed EtcdCluster %s (resourceVersion %s, then %s)", seedName, before, after)
	}
}

// testChartUpgradeKeepsHTTPS: helm upgrade keeps every webhook of the
// three CompositeControllers on https with the CA of the Secret, as
// manifests/ does, keeps the serving certificate the install issued byte
// for byte (Metacontroller trusts its CA), and leaves the EtcdCluster
// alone.
func testChartUpgradeKeepsHTTPS(t *testing.T, k *kube, h *helmClient) {
	before := resourceVersionOf(t, k, chartReleaseNamespace, "etcd/"+seedName)
	h.upgrade(t, chartTLS...)
	stored := checkStoredAsRendered(t, k, h, chartTLS...)
	if got := servingSecret(t, k); !maps.EqualFunc(got, installedCert, bytes.Equal) {
		t.Errorf("helm upgrade issued a new serving certificate: Metacontroller, which read the CA when it created its controllers, would distrust the hook")
	}
	for key, obj := range stored {
		if !strings.HasPrefix(key, "CompositeController/") {
			continue
		}
		hooks, _ := lookupPath(obj, ".spec.hooks").(map[string]any)
		for name := range hooks {
			if url, _ := lookupPath(obj, ".spec.hooks."+name+".webhook.url").(string); !strings.HasPrefix(url, "https://"+tlsHookHost+"/") {
				t.Errorf("%s: hooks.%s.webhook.url is %q, want https://%s/…", key, name, url, tlsHookHost)
			}
		}
		if host := lookupPath(obj, ".spec.endpointConfigs[0].host"); host != tlsHookHost {
			t.Errorf("%s: endpointConfigs[0].host is %v, want %s", key, host, tlsHookHost)
		}
	}
	if after := resourceVersionOf(t, k, chartReleaseNamespace, "etcd/"+seedName); after != before {
		t.Errorf("the upgrade changed EtcdCluster %s (resourceVersion %s, then %s)", seedName, before, after)
	}
}

// testChartUpgradeBackToHTTP: an upgrade to the plain HTTP opt-out
// (tls.enabled=false) takes away what HTTPS added (Helm's three-way
// merge), the issued Secret included, so that nothing is left of it.
func testChartUpgradeBackToHTTP(t *testing.T, k *kube, h *helmClient) {
	plain := []string{"--set", "tls.enabled=false"}
	h.upgrade(t, plain...)
	stored := checkStoredAsRendered(t, k, h, plain...)
	for key, obj := range stored {
		if strings.HasPrefix(key, "CompositeController/") {
			if got := lookupPath(obj, ".spec.endpointConfigs"); got != nil {
				t.Errorf("%s: spec.endpointConfigs %s left over after the upgrade back to plain HTTP", key, jsonString(t, got))
			}
		}
	}
	for _, p := range []string{".spec.template.spec.volumes", ".spec.template.spec.containers[0].volumeMounts", ".spec.template.spec.securityContext.fsGroup"} {
		if got := lookupPath(stored["Deployment/etcd-hook"], p); got != nil {
			t.Errorf("Deployment etcd-hook: %s %s left over after the upgrade back to plain HTTP", p, jsonString(t, got))
		}
	}
	if ports, _ := lookupPath(stored["Service/etcd-hook"], ".spec.ports").([]any); len(ports) != 1 {
		t.Errorf("Service etcd-hook: ports %s after the upgrade back to plain HTTP, want http alone", jsonString(t, ports))
	}
	if r := k.kubectl(t, "", "get", "secret", "etcd-hook-tls", "-n", chartHookNamespace); r.code == 0 {
		t.Errorf("the serving certificate the chart issued is left after the upgrade to plain HTTP")
	}
}

// testChartUninstall: helm uninstall deletes the chart's objects but not
// the CRDs (Helm never deletes crds/), so every EtcdCluster and its data
// stay. The namespace stays Terminating: nothing runs the namespace
// controller here.
func testChartUninstall(t *testing.T, k *kube, h *helmClient) {
	// What the release holds (monitoring objects included), and its CRDs.
	manifest := h.manifest(t) + "\n---\n" + h.template(t)
	h.run(t, "uninstall", chartRelease, "--namespace", chartReleaseNamespace)

	r := k.kubectl(t, manifest, "get", "-f", "-", "-o", "json", "--ignore-not-found")
	if r.code != 0 {
		t.Fatal(r)
	}
	var left struct {
		Items []map[string]any `json:"items"`
	}
	if strings.TrimSpace(r.stdout) != "" {
		unmarshal(t, r.stdout, &left)
	}
	var kept []string
	for _, obj := range left.Items {
		key := objectKey(obj)
		switch {
		case obj["kind"] == "CustomResourceDefinition":
			kept = append(kept, key)
		case key == "Namespace/"+chartHookNamespace && lookupPath(obj, ".metadata.deletionTimestamp") != nil:
			// Terminating: the namespace controller would finish it.
		default:
			t.Errorf("%s is still there after helm uninstall", key)
		}
	}
	if len(kept) != 3 {
		t.Errorf("CRDs kept after helm uninstall: %v, want the three etcd.database.coreos.com CRDs", kept)
	}
	resourceVersionOf(t, k, chartReleaseNamespace, "etcd/"+seedName) // still there
}

// testChartAdopt: an install made with kubectl apply -k manifests/ moves
// to Helm as the chart's README says: annotate and label its objects as
// the release's, then helm install. The CompositeControllers' specs do not
// change (their generation stays), so Metacontroller would not even
// restart them, and the EtcdCluster is not touched.
func testChartAdopt(t *testing.T, k *kube, h *helmClient) {
	// The install page's two commands: the serving certificate, then the
	// manifests.
	issued := issueCertificate(t, k)
	noWarnings(t, k.mustKubectl(t, "", "apply", "--validate=strict", "-k", "manifests/"))
	noWarnings(t, k.mustKubectl(t, "", "apply", "--validate=strict", "-n", chartReleaseNamespace,
		"-f", filepath.Join(examplesDir, seedExample)))
	generations := map[string]any{}
	for _, name := range []string{"etcd-hook", "etcd-backup", "etcd-restore"} {
		var obj map[string]any
		unmarshal(t, k.mustKubectl(t, "", "get", "compositecontroller.metacontroller.k8s.io/"+name, "-o", "json").stdout, &obj)
		generations[name] = lookupPath(obj, ".metadata.generation")
	}
	cluster := resourceVersionOf(t, k, chartReleaseNamespace, "etcd/"+seedName)

	// The README's commands.
	rendering := k.mustKubectl(t, "", "kustomize", "manifests/").stdout
	k.mustKubectl(t, rendering, "annotate", "--overwrite", "-f", "-",
		"meta.helm.sh/release-name="+chartRelease, "meta.helm.sh/release-namespace="+chartReleaseNamespace)
	k.mustKubectl(t, rendering, "label", "--overwrite", "-f", "-", "app.kubernetes.io/managed-by=Helm")
	k.mustKubectl(t, "", "annotate", "--overwrite", "secret", "etcd-hook-tls", "-n", chartHookNamespace,
		"meta.helm.sh/release-name="+chartRelease, "meta.helm.sh/release-namespace="+chartReleaseNamespace)
	k.mustKubectl(t, "", "label", "--overwrite", "secret", "etcd-hook-tls", "-n", chartHookNamespace, "app.kubernetes.io/managed-by=Helm")

	h.install(t)
	checkStoredAsRendered(t, k, h)
	if got := servingSecret(t, k); !maps.EqualFunc(got, issued, bytes.Equal) {
		t.Errorf("helm install replaced the serving certificate issue-certificate.sh made: Metacontroller would distrust the hook")
	}
	for name, before := range generations {
		var obj map[string]any
		unmarshal(t, k.mustKubectl(t, "", "get", "compositecontroller.metacontroller.k8s.io/"+name, "-o", "json").stdout, &obj)
		if after := lookupPath(obj, ".metadata.generation"); after != before {
			t.Errorf("CompositeController %s: generation %v after helm install, %v before: its spec changed", name, after, before)
		}
	}
	if after := resourceVersionOf(t, k, chartReleaseNamespace, "etcd/"+seedName); after != cluster {
		t.Errorf("helm install changed EtcdCluster %s (resourceVersion %s, then %s)", seedName, cluster, after)
	}
	status := h.run(t, "status", chartRelease, "--namespace", chartReleaseNamespace, "-o", "json").stdout
	var release struct {
		Info struct {
			Status string `json:"status"`
		} `json:"info"`
	}
	unmarshal(t, status, &release)
	if release.Info.Status != "deployed" {
		t.Errorf("helm status: %q, want deployed", release.Info.Status)
	}
}

// resourceVersionOf returns an object's resourceVersion, failing when it
// is not there.
func resourceVersionOf(t *testing.T, k *kube, ns, what string) string {
	t.Helper()
	return k.mustKubectl(t, "", "get", what, "-n", ns, "-o", "jsonpath={.metadata.resourceVersion}").stdout
}
