package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const (
	crdName       = "etcdclusters.etcd.database.coreos.com"
	resourcePath  = "/apis/etcd.database.coreos.com/v1beta2"
	examplesDir   = "manifests/examples"
	seedExample   = "example-etcd-cluster.yaml"
	seedName      = "example-etcd-cluster"
	seedVersion   = "3.2.13"
	seedSize      = 3
	metacontrolCR = "compositecontroller.metacontroller.k8s.io/etcd-hook"

	// Namespaces of the examples: one per apply mode, so that client-side
	// and server-side field ownership never mix on one object.
	nsClientSide = "examples-client-side"
	nsServerSide = "examples-server-side"
	nsRejected   = "rejected"
)

// metacontrollerCRDs is Metacontroller's own CRDs, kept beside this
// repository (../shared in CI, where the repository is a clone next to it).
// METACONTROLLER_CRDS overrides the path.
func metacontrollerCRDs(t *testing.T) string {
	t.Helper()
	p := os.Getenv("METACONTROLLER_CRDS")
	if p == "" {
		p = filepath.Join(testenv.SharedDir(t), "metacontroller", "metacontroller-crds-v1.yaml")
	}
	_, err := os.Stat(p)
	testenv.Require(t, err == nil, "Metacontroller's CRDs, which the CompositeController is validated against: %v (set METACONTROLLER_CRDS to their path)", err)
	return p
}

// TestManifests runs every check against one API server, in order: each
// step builds on what the previous ones installed.
func TestManifests(t *testing.T) {
	// Checked first: without it the rest would only fail.
	crds := metacontrollerCRDs(t)
	start := time.Now()
	k := startKube(t)
	t.Logf("etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))

	steps := []struct {
		name string
		fn   func(*testing.T, *kube)
	}{
		{"Install", func(t *testing.T, k *kube) { testInstall(t, k, crds) }},
		{"Examples", testExamples},
		{"NoDrift", testNoDrift},
		{"Rejected", testRejected},
		{"BackupRejected", testBackupRejected},
		{"RestoreAdmission", testRestoreAdmission},
		{"Accepted", testAccepted},
		{"UnknownFields", testUnknownFields},
		{"PrinterColumns", testPrinterColumns},
		{"TLSOverlays", testTLSOverlays},
		{"RenderedChildren", testRenderedChildren},
		{"Placement", testPlacement},
		{"ClaimGrowth", testClaimGrowth},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.fn(t, k) }) && s.name == "Install" {
			t.Fatal("the manifests did not install; nothing else can be checked")
		}
	}
}

// noWarnings fails when kubectl printed a warning from the API server
// (deprecated API, PodSecurity, unknown field, ...).
func noWarnings(t *testing.T, r result) {
	t.Helper()
	if strings.Contains(r.stderr, "Warning:") {
		t.Errorf("unexpected warning:\n%s", r)
	}
}

// testInstall: Metacontroller's CRDs first, so that the CompositeController
// is validated against its real schema, then manifests/ with kubectl apply
// -k, client-side as the install page says and server-side, each with
// strict field validation (a field the schema does not know is an error,
// not pruned).
func testInstall(t *testing.T, k *kube, crds string) {
	k.mustKubectl(t, "", "apply", "--server-side", "--validate=strict", "-f", crds)
	k.mustKubectl(t, "", "wait", "--for=condition=Established", "--timeout=30s", "-f", crds)

	r := k.mustKubectl(t, "", "apply", "--validate=strict", "-k", "manifests/")
	noWarnings(t, r)
	k.mustKubectl(t, "", "wait", "--for=condition=Established", "--timeout=30s", "crd/"+crdName)
	if r := k.kubectl(t, "", "diff", "-k", "manifests/"); r.code != 0 || r.stdout != "" {
		t.Errorf("drift right after a client-side apply -k:\n%s", r)
	}

	r = k.mustKubectl(t, "", "apply", "--server-side", "--validate=strict", "-k", "manifests/")
	noWarnings(t, r)
	if r := k.kubectl(t, "", "diff", "--server-side", "-k", "manifests/"); r.code != 0 || r.stdout != "" {
		t.Errorf("drift right after a server-side apply -k:\n%s", r)
	}

	// Everything in the kustomization exists, and the CompositeController
	// kept every field it was given (Metacontroller's schema pruned nothing).
	got := k.mustKubectl(t, "", "get", "-k", "manifests/", "-o", "name").stdout
	for _, want := range []string{
		"customresourcedefinition.apiextensions.k8s.io/" + crdName,
		"namespace/etcd-hook",
		"serviceaccount/etcd-hook",
		"deployment.apps/etcd-hook",
		"service/etcd-hook",
		"poddisruptionbudget.policy/etcd-hook",
		"clusterrole.rbac.authorization.k8s.io/etcd-hook-metacontroller",
		"clusterrolebinding.rbac.authorization.k8s.io/etcd-hook-metacontroller",
		metacontrolCR,
	} {
		if !slices.Contains(strings.Fields(got), want) {
			t.Errorf("kubectl get -k manifests/ does not list %s:\n%s", want, got)
		}
	}
	var want, live map[string]any
	for _, obj := range rendered(t, k, k.mustKubectl(t, "", "kustomize", "manifests/").stdout) {
		if obj["kind"] == "CompositeController" && lookupPath(obj, ".metadata.name") == "etcd-hook" {
			want = obj
		}
	}
	if want == nil {
		t.Fatal("kubectl kustomize manifests/ renders no CompositeController etcd-hook")
	}
	if url, _ := lookupPath(want, ".spec.hooks.sync.webhook.url").(string); !strings.HasPrefix(url, "https://") {
		t.Errorf("kubectl apply -k manifests/ has Metacontroller call the hook at %q: the default install must be HTTPS", url)
	}
	unmarshal(t, k.mustKubectl(t, "", "get", metacontrolCR, "-o", "json").stdout, &live)
	// Metacontroller's schema defaults hooks.*.version; it must drop or
	// change nothing that the manifest says.
	for _, p := range notKept(".spec", want["spec"], live["spec"]) {
		t.Errorf("the CompositeController's %s did not survive admission: the manifest says %s", p, jsonString(t, lookupPath(want, p)))
	}

	for _, ns := range []string{nsClientSide, nsServerSide, nsRejected} {
		k.mustKubectl(t, "", "create", "namespace", ns)
	}
}

// exampleFiles lists every file in manifests/examples.
func exampleFiles(t *testing.T, k *kube) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(k.root, examplesDir))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() {
			files = append(files, filepath.Join(examplesDir, e.Name()))
		}
	}
	if len(files) == 0 {
		t.Fatalf("no file in %s", examplesDir)
	}
	return files
}

// testExamples applies every example, client-side and server-side, with
// strict field validation and no warning, and checks what was stored.
func testExamples(t *testing.T, k *kube) {
	for _, f := range exampleFiles(t, k) {
		noWarnings(t, k.mustKubectl(t, "", "apply", "--validate=strict", "-n", nsClientSide, "-f", f))
		noWarnings(t, k.mustKubectl(t, "", "apply", "--server-side", "--validate=strict", "-n", nsServerSide, "-f", f))
	}

	// The seed is the CoreOS operator's example and keeps its version: only
	// the repository is defaulted.
	var c v1beta2.EtcdCluster
	unmarshal(t, k.mustKubectl(t, "", "get", "etcd", seedName, "-n", nsClientSide, "-o", "json").stdout, &c)
	if c.APIVersion != v1beta2.APIVersion || c.Spec.Size != seedSize || c.Spec.Version != seedVersion ||
		c.Spec.Repository != v1beta2.DefaultRepository {
		t.Errorf("stored seed: apiVersion %q, size %d, version %q, repository %q; want %q, %d, %q, %q",
			c.APIVersion, c.Spec.Size, c.Spec.Version, c.Spec.Repository,
			v1beta2.APIVersion, seedSize, seedVersion, v1beta2.DefaultRepository)
	}
	got := k.mustKubectl(t, "", "get", "etcd", "-n", nsServerSide, "-o", "name").stdout
	for _, name := range []string{seedName, "example", "example-pod-policy", "example-etcd-settings"} {
		if !slices.Contains(strings.Fields(got), "etcdcluster.etcd.database.coreos.com/"+name) {
			t.Errorf("kubectl get etcd does not list %s:\n%s", name, got)
		}
	}
}

// testNoDrift: once an example is applied, kubectl diff shows nothing and a
// second apply changes nothing, so the CRD's defaults do not fight a GitOps
// tool that keeps applying the file from Git.
func testNoDrift(t *testing.T, k *kube) {
	for _, f := range exampleFiles(t, k) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if r := k.kubectl(t, "", "diff", "-n", nsClientSide, "-f", f); r.code != 0 || r.stdout != "" {
				t.Errorf("client-side: drift after apply:\n%s", r)
			}
			if r := k.kubectl(t, "", "diff", "--server-side", "-n", nsServerSide, "-f", f); r.code != 0 || r.stdout != "" {
				t.Errorf("server-side: drift after apply:\n%s", r)
			}

			before := resourceVersion(t, k, nsClientSide, f)
			if r := k.mustKubectl(t, "", "apply", "-n", nsClientSide, "-f", f); !strings.HasSuffix(strings.TrimSpace(r.stdout), " unchanged") {
				t.Errorf("client-side: a second apply changed the object:\n%s", r)
			}
			if after := resourceVersion(t, k, nsClientSide, f); after != before {
				t.Errorf("client-side: a second apply wrote the object: resourceVersion %s -> %s", before, after)
			}
			before = resourceVersion(t, k, nsServerSide, f)
			k.mustKubectl(t, "", "apply", "--server-side", "-n", nsServerSide, "-f", f)
			if after := resourceVersion(t, k, nsServerSide, f); after != before {
				t.Errorf("server-side: a second apply wrote the object: resourceVersion %s -> %s", before, after)
			}
		})
	}
}

func resourceVersion(t *testing.T, k *kube, ns, file string) string {
	t.Helper()
	return k.mustKubectl(t, "", "get", "-n", ns, "-f", file, "-o", "jsonpath={.metadata.resourceVersion}").stdout
}

func unmarshal(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v in:\n%s", err, s)
	}
}

// columns runs kubectl get etcd <name> and returns its columns by header;
// an empty cell (a field the object does not have) is "".
func columns(t *testing.T, k *kube, ns, name string) map[string]string {
	t.Helper()
	out := k.mustKubectl(t, "", "get", "etcd", name, "-n", ns).stdout
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get etcd %s: want a header and one row, got:\n%s", name, out)
	}
	head := strings.Fields(lines[0])
	if want := []string{"NAME", "SIZE", "READY", "VERSION", "PHASE", "AGE"}; !slices.Equal(head, want) {
		t.Fatalf("kubectl get etcd: columns %v, want %v", head, want)
	}
	// kubectl left-aligns every cell under its header.
	cols := map[string]string{}
	row := lines[1]
	for i, h := range head {
		from := strings.Index(lines[0], h)
		to := len(row)
		if i+1 < len(head) {
			to = min(to, strings.Index(lines[0], head[i+1]))
		}
		if from > len(row) {
			from = len(row)
		}
		cols[h] = strings.TrimSpace(row[from:to])
	}
	return cols
}

// putStatus writes status through the /status subresource the way
// Metacontroller does (an update of the whole object), and returns the
// object the API server stored.
func putStatus(t *testing.T, k *kube, ns, name string, status json.RawMessage) map[string]any {
	t.Helper()
	path := resourcePath + "/namespaces/" + ns + "/etcdclusters/" + name
	code, b, err := k.do(http.MethodGet, path, "", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d, %v\n%s", path, code, err, b)
	}
	var obj map[string]any
	unmarshal(t, string(b), &obj)
	var st any
	unmarshal(t, string(status), &st)
	obj["status"] = st
	body, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	code, b, err = k.do(http.MethodPut, path+"/status", "", body)
	if err != nil || code != http.StatusOK {
		t.Fatalf("PUT %s/status: HTTP %d, %v\n%s", path, code, err, b)
	}
	var stored map[string]any
	unmarshal(t, string(b), &stored)
	return stored
}

// testPrinterColumns: kubectl get etcd shows the printer columns with real
// values once a status in the hook's shape is written through /status: the
// hook's own answer for a new cluster (hooks/testdata), then a Running
// status built from the Go types. The status subresource keeps every field
// (the schema prunes none of the hook's status) and leaves generation alone.
func testPrinterColumns(t *testing.T, k *kube) {
	ns := nsClientSide
	generation := func() int64 {
		var m metav1.PartialObjectMetadata
		unmarshal(t, k.mustKubectl(t, "", "get", "etcd", seedName, "-n", ns, "-o", "json").stdout, &m)
		return m.Generation
	}
	gen := generation()

	cols := columns(t, k, ns, seedName)
	if cols["SIZE"] != "3" || cols["READY"] != "" || cols["VERSION"] != "" || cols["PHASE"] != "" {
		t.Errorf("before any status: columns %v", cols)
	}

	// The hook's answer to Metacontroller for this very example.
	b, err := os.ReadFile(filepath.Join(k.root, "hooks", "testdata", "new-cluster.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Status json.RawMessage `json:"status"`
	}
	unmarshal(t, string(b), &golden)
	stored := putStatus(t, k, ns, seedName, golden.Status)
	var sent any
	unmarshal(t, string(golden.Status), &sent)
	if diff := cmp.Diff(sent, stored["status"]); diff != "" {
		t.Errorf("the stored status differs from the hook's (-hook +stored):\n%s", diff)
	}
	cols = columns(t, k, ns, seedName)
	if cols["SIZE"] != "3" || cols["READY"] != "0" || cols["VERSION"] != "" || cols["PHASE"] != string(v1beta2.PhaseCreating) {
		t.Errorf("after the hook's new-cluster status: columns %v; want SIZE 3, READY 0, no VERSION, PHASE Creating", cols)
	}

	// A Running cluster, in the Go types the hook answers with.
	at := metav1.NewTime(time.Date(2026, 11, 22, 8, 1, 0, 0, time.UTC))
	members := []string{seedName + "-qlpck", seedName + "-x7k2m", seedName + "-b9v4t"}
	running := v1beta2.ClusterStatus{
		ObservedGeneration: gen,
		Phase:              v1beta2.PhaseRunning,
		Reason:             "all 3 members are ready",
		Conditions: []v1beta2.ClusterCondition{
			{Type: v1beta2.ConditionAvailable, Status: metav1.ConditionTrue, Reason: "QuorumHealthy", Message: "3 of 3 voters answer", LastTransitionTime: at},
			{Type: v1beta2.ConditionProgressing, Status: metav1.ConditionFalse, Reason: "AsExpected", Message: "membership matches the spec", LastTransitionTime: at},
			{Type: v1beta2.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "AsExpected", Message: "no problem observed", LastTransitionTime: at},
		},
		Size:           3,
		ReadyMembers:   3,
		Members:        v1beta2.MembersStatus{Ready: members},
		ServiceName:    seedName + "-client",
		ClientPort:     2379,
		CurrentVersion: seedVersion,
		TargetVersion:  seedVersion,
		Bootstrap: &v1beta2.BootstrapStatus{
			SeedMember: members[0], Bootstrapped: true, ClusterID: "8e9e05c52164694d", RecreatedFrom: seedName + "-zzzzz",
		},
		Storage: &v1beta2.StorageStatus{Requested: "2Gi", Capacity: "1Gi", Claims: []v1beta2.ClaimStatus{
			{Name: members[0], Requested: "2Gi", Capacity: "2Gi"},
			{Name: members[1], Requested: "2Gi", Capacity: "1Gi", Resizing: "waits for its file system to grow (FileSystemResizePending)"},
			{Name: members[2], Requested: "1Gi", Capacity: "1Gi"},
		}},
	}
	raw, err := json.Marshal(running)
	if err != nil {
		t.Fatal(err)
	}
	stored = putStatus(t, k, ns, seedName, raw)
	unmarshal(t, string(raw), &sent)
	if diff := cmp.Diff(sent, stored["status"]); diff != "" {
		t.Errorf("the stored status differs from the one written (-written +stored):\n%s", diff)
	}
	cols = columns(t, k, ns, seedName)
	want := map[string]string{"NAME": seedName, "SIZE": "3", "READY": "3", "VERSION": seedVersion, "PHASE": string(v1beta2.PhaseRunning), "AGE": cols["AGE"]}
	if diff := cmp.Diff(want, cols); diff != "" || cols["AGE"] == "" {
		t.Errorf("kubectl get etcd after a Running status (-want +got):\n%s", diff)
	}

	if got := generation(); got != gen {
		t.Errorf("a status update changed metadata.generation: %d -> %d", gen, got)
	}
	// The status does not count as drift either.
	f := filepath.Join(examplesDir, seedExample)
	if r := k.kubectl(t, "", "diff", "-n", ns, "-f", f); r.code != 0 || r.stdout != "" {
		t.Errorf("drift after a status update:\n%s", r)
	}

	// The short name and the "all" and "etcd" categories find it.
	for _, what := range []string{"etcd", "all", "etcdclusters"} {
		out := k.mustKubectl(t, "", "get", what, "-n", ns, "-o", "name").stdout
		if !slices.Contains(strings.Fields(out), "etcdcluster.etcd.database.coreos.com/"+seedName) {
			t.Errorf("kubectl get %s does not list %s:\n%s", what, seedName, out)
		}
	}
}

// notKept returns the paths under want whose value got is missing or
// differs from: fields that admission pruned or changed. Fields only in got
// (defaults) are fine.
func notKept(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{path}
		}
		var out []string
		for key, v := range w {
			out = append(out, notKept(path+"."+key, v, g[key])...)
		}
		slices.Sort(out)
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{path}
		}
		var out []string
		for i := range w {
			out = append(out, notKept(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		if !cmp.Equal(want, got) {
			return []string{path}
		}
		return nil
	}
}

// lookupPath follows a path made by notKept (".a.b[2].c") from obj.
func lookupPath(obj any, path string) any {
	for _, part := range strings.Split(strings.TrimPrefix(path, "."), ".") {
		name, index, _ := strings.Cut(part, "[")
		if m, ok := obj.(map[string]any); ok {
			obj = m[name]
		}
		for index != "" {
			var i int
			var rest string
			fmt.Sscanf(index, "%d]", &i)
			_, rest, _ = strings.Cut(index, "]")
			if l, ok := obj.([]any); ok && i < len(l) {
				obj = l[i]
			}
			index = strings.TrimPrefix(rest, "[")
		}
	}
	return obj
}

func jsonString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
