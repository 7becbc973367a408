package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// notChecked is the API server's note, added to the causes when a schema
// error kept it from evaluating the CEL rules.
const notChecked = `<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation`

// invalidClusters are EtcdClusters the API server must refuse at admission,
// with the causes it returns, each as "<field>: <message>" (the Status
// message is "<Kind>.<group> "<name>" is invalid: " followed by the cause,
// or by all of them in brackets). The troubleshooting page's "Admission
// errors" lists each of these messages verbatim.
var invalidClusters = []struct {
	name    string // the subtest, and metadata.name unless objName is set
	objName string
	spec    string // spec, YAML flow style
	want    []string
}{
	{name: "size-zero", spec: `{size: 0}`,
		want: []string{`spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1`}},
	{name: "size-negative", spec: `{size: -1}`,
		want: []string{`spec.size: Invalid value: -1: spec.size in body should be greater than or equal to 1`}},
	{name: "size-too-large", spec: `{size: 8}`,
		want: []string{`spec.size: Invalid value: 8: spec.size in body should be less than or equal to 7`}},
	// With "format: int32" on spec.size (there is none, on purpose), this
	// and size-boolean would get causes that name no field or no type.
	{name: "size-beyond-int32", spec: `{size: 9999999999}`,
		want: []string{`spec.size: Invalid value: 9999999999: spec.size in body should be less than or equal to 7`}},
	{name: "size-string", spec: `{size: "3"}`,
		want: []string{`spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"`, notChecked}},
	{name: "size-boolean", spec: `{size: true}`,
		want: []string{`spec.size: Invalid value: "boolean": spec.size in body must be of type integer: "boolean"`, notChecked}},
	// The second cause is the API server's own (its field is lost on the
	// way); nothing in the CRD can change it.
	{name: "size-fraction", spec: `{size: 2.5}`,
		want: []string{
			`spec.size: Invalid value: "number": spec.size in body must be of type integer: "number"`,
			`<nil>: Invalid value: "": Checked value must be of type integer (default format) in spec.size`,
			notChecked,
		}},
	{name: "size-missing", spec: `{version: "3.6.16"}`,
		want: []string{`spec.size: Required value`, notChecked}},
	{name: "version-not-semver", spec: `{size: 3, version: "3.6"}`,
		want: []string{`spec.version: Invalid value: "3.6": must be a semantic version such as "3.7.3"`}},
	{name: "version-latest", spec: `{size: 3, version: latest}`,
		want: []string{`spec.version: Invalid value: "latest": must be a semantic version such as "3.7.3"`}},
	{name: "reserved-label-app", spec: `{size: 3, pod: {labels: {app: mine}}}`,
		want: []string{`spec: Invalid value: spec.pod.labels: the labels "app" and "etcd.database.coreos.com/serving" and labels starting with "etcd_" are reserved for the hook`}},
	{name: "reserved-label-etcd", spec: `{size: 3, pod: {labels: {etcd_node: x}}}`,
		want: []string{`spec: Invalid value: spec.pod.labels: the labels "app" and "etcd.database.coreos.com/serving" and labels starting with "etcd_" are reserved for the hook`}},
	{name: "reserved-label-serving", spec: `{size: 3, pod: {labels: {etcd.database.coreos.com/serving: "true"}}}`,
		want: []string{`spec: Invalid value: spec.pod.labels: the labels "app" and "etcd.database.coreos.com/serving" and labels starting with "etcd_" are reserved for the hook`}},
	{name: "tls-operator-secret-alone", spec: `{size: 3, TLS: {static: {operatorSecret: etcd-client-tls}}}`,
		want: []string{`spec.TLS: Invalid value: spec.TLS.static: operatorSecret and member.serverSecret are set together or not at all`}},
	{name: "tls-server-secret-alone", spec: `{size: 3, TLS: {static: {member: {peerSecret: etcd-peer-tls, serverSecret: etcd-server-tls}}}}`,
		want: []string{`spec.TLS: Invalid value: spec.TLS.static: operatorSecret and member.serverSecret are set together or not at all`}},
	{name: "tls-static-and-auto", spec: `{size: 3, TLS: {auto: {}, static: {member: {peerSecret: etcd-peer-tls}}}}`,
		want: []string{`spec.TLS: Invalid value: spec.TLS: static and auto cannot be combined: static names Secrets you issue, auto has the hook issue them`}},
	{name: "tls-auto-validity-too-short", spec: `{size: 3, TLS: {auto: {validity: 4m}}}`,
		want: []string{`spec.TLS.auto: Invalid value: spec.TLS.auto.validity: at least 5m`}},
	{name: "tls-auto-renew-before-validity", spec: `{size: 3, TLS: {auto: {validity: 6m, renewBefore: 6m}}}`,
		want: []string{`spec.TLS.auto: Invalid value: spec.TLS.auto.renewBefore: at least 1m, and shorter than validity`}},
	{name: "spread-unknown", spec: `{size: 3, pod: {spread: zones}}`,
		want: []string{`spec.pod.spread: Unsupported value: "zones": supported values: "preferred", "strict"`, notChecked}},
	{name: "spread-with-own-constraints", spec: `{size: 3, pod: {spread: strict, topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]}}`,
		want: []string{`spec: Invalid value: spec.pod.spread shapes the default placement, which spec.pod.affinity and spec.pod.topologySpreadConstraints replace: set whenUnsatisfiable in your own constraints instead`}},
	{name: "auth-without-tls", spec: `{size: 3, auth: {enabled: true}}`,
		want: []string{`spec: Invalid value: spec.auth.enabled needs spec.TLS (auto, or static with operatorSecret): the hook authenticates as root with its client certificate`}},
	{name: "auth-root-user", spec: `{size: 3, TLS: {auto: {}}, auth: {enabled: true, users: [{name: root}]}}`,
		want: []string{`spec.auth: Invalid value: spec.auth.users: root is the hook's own user and cannot be declared`}},
	{name: "auth-root-role", spec: `{size: 3, TLS: {auto: {}}, auth: {enabled: true, roles: [{name: root}]}}`,
		want: []string{`spec.auth: Invalid value: spec.auth.roles: root is etcd's built-in role and cannot be declared`}},
	{name: "auth-prefix-and-range", spec: `{size: 3, TLS: {auto: {}}, auth: {enabled: true, roles: [{name: r, permissions: [{key: /a, prefix: true, rangeEnd: /b, type: read}]}]}}`,
		want: []string{`spec.auth.roles[0].permissions[0]: Invalid value: spec.auth.roles.permissions: prefix and rangeEnd cannot be combined`}},
	{name: "name-too-long", objName: strings.Repeat("a", 57), spec: `{size: 3}`,
		want: []string{`<nil>: Invalid value: metadata.name must be at most 56 characters: it names the member Pods (<name>-<5 characters>) and the Service <name>-client, which must be DNS labels of at most 63 characters`}},
	{name: "name-not-dns-label", objName: "etcd.example", spec: `{size: 3}`,
		want: []string{`<nil>: Invalid value: metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter): it is also the name of the cluster's Services and the Pods' subdomain`}},
}

func clusterYAML(name, spec string) string {
	return fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: %q}\nspec: %s\n", v1beta2.APIVersion, v1beta2.Kind, name, spec)
}

// admissionErrorsPage lists, in its section "Admission errors", every
// message an invalid EtcdCluster is refused with.
const admissionErrorsPage = "docs/troubleshooting.md"

// testRejected: every invalid EtcdCluster is refused by the API server
// (kubectl apply and a plain POST), with the message the troubleshooting
// page lists.
func testRejected(t *testing.T, k *kube) {
	page, err := os.ReadFile(filepath.Join(k.root, filepath.FromSlash(admissionErrorsPage)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range invalidClusters {
		t.Run(c.name, func(t *testing.T) {
			name := c.name
			if c.objName != "" {
				name = c.objName
			}
			doc := clusterYAML(name, c.spec)
			r := k.kubectl(t, doc, "apply", "-n", nsRejected, "-f", "-")
			if r.code == 0 {
				t.Errorf("kubectl apply accepted an invalid cluster:\n%s\n(document:\n%s)", r, doc)
			}
			for _, want := range c.want {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("kubectl apply: want the cause %q, got:\n%s\n(document:\n%s)", want, r, doc)
				}
			}

			// The same through the API, to see the exact Status.
			body := k.mustKubectl(t, doc, "create", "--dry-run=client", "-o", "json", "-n", nsRejected, "-f", "-").stdout
			status, resp, err := k.do(http.MethodPost, resourcePath+"/namespaces/"+nsRejected+"/etcdclusters", "", []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			var st metav1.Status
			unmarshal(t, string(resp), &st)
			causes := c.want[0]
			if len(c.want) > 1 {
				causes = "[" + strings.Join(c.want, ", ") + "]"
			}
			wantMsg := fmt.Sprintf("%s.%s %q is invalid: %s", v1beta2.Kind, v1beta2.Group, name, causes)
			if status != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid || st.Message != wantMsg {
				t.Errorf("POST: HTTP %d, reason %q, message\n  %q\nwant HTTP 422, reason Invalid, message\n  %q", status, st.Reason, st.Message, wantMsg)
			}

			for _, want := range c.want {
				if !strings.Contains(string(page), "`"+want+"`") {
					t.Errorf("%s does not list the admission error `%s` (section \"Admission errors\")", admissionErrorsPage, want)
				}
			}
		})
	}
}

// validClusters sit on the edges of the schema and must be accepted.
var validClusters = []struct{ name, spec string }{
	{name: "size-one", spec: `{size: 1}`},
	{name: "size-seven", spec: `{size: 7}`},
	{name: "version-leading-v", spec: `{size: 3, version: v3.6.16}`},
	{name: "version-prerelease", spec: `{size: 3, version: 3.6.0-rc.1}`},
	{name: "a" + strings.Repeat("b", 55), spec: `{size: 3}`},
	{name: "other-labels", spec: `{size: 3, pod: {labels: {application: x, my-etcd_x: "y"}}}`},
	{name: "tls-coreos", spec: `{size: 3, TLS: {static: {member: {peerSecret: etcd-peer-tls, serverSecret: etcd-server-tls}, operatorSecret: etcd-client-tls}}}`},
	{name: "tls-peer-only", spec: `{size: 3, TLS: {static: {member: {peerSecret: etcd-peer-tls}}}}`},
	{name: "spread-strict", spec: `{size: 3, pod: {spread: strict}}`},
	{name: "hibernated", spec: `{size: 3, hibernated: true, pod: {persistentVolumeClaimSpec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}}`},
}

// testAccepted: the schema does not refuse what the hook accepts.
func testAccepted(t *testing.T, k *kube) {
	for _, c := range validClusters {
		doc := clusterYAML(c.name, c.spec)
		r := k.kubectl(t, doc, "apply", "--dry-run=server", "--validate=strict", "-n", nsRejected, "-f", "-")
		if r.code != 0 {
			t.Errorf("%s: refused:\n%s\n(document:\n%s)", c.name, r, doc)
		}
		noWarnings(t, r)
	}
}

func unmarshal(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v in:\n%s", err, s)
	}
}

// unknownFieldCluster misspells spec.paused, the kind of typo that must
// not pass unnoticed.
var unknownFieldCluster = clusterYAML("typo", `{size: 3, pause: true}`)

// The messages for an unknown field, by validation mode. The
// troubleshooting page lists each of them.
const (
	unknownStrictClientSide = `strict decoding error: unknown field "spec.pause"`
	unknownStrictServerSide = `.spec.pause: field not declared in schema`
	unknownWarning          = `unknown field "spec.pause"`
)

// testUnknownFields pins down, deliberately, what happens to a field the
// schema does not know: the CRD prunes unknown fields (it does not preserve
// them), and the API server's field validation decides whether that pruning
// is an error (Strict, kubectl's default), a warning (Warn, the API
// server's default for requests that do not say) or silent (Ignore).
// Server-side apply refuses it in every mode.
func testUnknownFields(t *testing.T, k *kube) {
	page, err := os.ReadFile(filepath.Join(k.root, filepath.FromSlash(admissionErrorsPage)))
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{unknownStrictClientSide, unknownStrictServerSide, unknownWarning} {
		if !strings.Contains(string(page), "`"+msg+"`") {
			t.Errorf("%s does not list the admission error `%s` (section \"Admission errors\")", admissionErrorsPage, msg)
		}
	}

	// kubectl apply validates strictly by default: refused.
	r := k.kubectl(t, unknownFieldCluster, "apply", "-n", nsRejected, "-f", "-")
	if r.code == 0 || !strings.Contains(r.stderr, unknownStrictClientSide) {
		t.Errorf("kubectl apply: want a refusal with %q, got:\n%s", unknownStrictClientSide, r)
	}
	// Server-side apply refuses a field the schema does not declare
	// whatever the validation mode: its patch is typed by the schema.
	for _, validate := range []string{"--validate=strict", "--validate=false"} {
		r = k.kubectl(t, unknownFieldCluster, "apply", "--server-side", validate, "-n", nsRejected, "-f", "-")
		if r.code == 0 || !strings.Contains(r.stderr, unknownStrictServerSide) {
			t.Errorf("kubectl apply --server-side %s: want a refusal with %q, got:\n%s", validate, unknownStrictServerSide, r)
		}
	}

	// fieldValidation=Strict through the API.
	body := []byte(k.mustKubectl(t, unknownFieldCluster, "create", "--dry-run=client", "-o", "json", "-n", nsRejected, "-f", "-").stdout)
	collection := resourcePath + "/namespaces/" + nsRejected + "/etcdclusters"
	status, resp, err := k.do(http.MethodPost, collection+"?fieldValidation=Strict", "", body)
	if err != nil {
		t.Fatal(err)
	}
	var st metav1.Status
	unmarshal(t, string(resp), &st)
	if status != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest || !strings.Contains(st.Message, unknownStrictClientSide) {
		t.Errorf("POST ?fieldValidation=Strict: HTTP %d, reason %q, message %q; want HTTP 400, BadRequest, %q",
			status, st.Reason, st.Message, unknownStrictClientSide)
	}

	// --validate=warn: accepted with a warning, and the field is pruned.
	r = k.mustKubectl(t, unknownFieldCluster, "apply", "--validate=warn", "-n", nsRejected, "-f", "-")
	if !strings.Contains(r.stderr, "Warning: "+unknownWarning) {
		t.Errorf("kubectl apply --validate=warn: want the warning %q, got:\n%s", unknownWarning, r)
	}
	checkPruned(t, k, "typo")
	k.mustKubectl(t, "", "delete", "etcd", "typo", "-n", nsRejected, "--wait=false")

	// No fieldValidation parameter (older clients, controllers): the API
	// server's default is Warn.
	status, hdr, resp, err := k.doHeaders(http.MethodPost, collection, "", body)
	if err != nil {
		t.Fatal(err)
	}
	if warnings := warningTexts(t, hdr); status != http.StatusCreated || !slices.Contains(warnings, unknownWarning) {
		t.Errorf("POST without fieldValidation: HTTP %d, warnings %q; want 201 and %q\n%s", status, warnings, unknownWarning, resp)
	}
	checkPruned(t, k, "typo")
	k.mustKubectl(t, "", "delete", "etcd", "typo", "-n", nsRejected, "--wait=false")
}

// warningTexts returns the texts of the Warning headers (RFC 7234: 299 - "text").
func warningTexts(t *testing.T, hdr http.Header) []string {
	t.Helper()
	var texts []string
	for _, w := range hdr.Values("Warning") {
		code, rest, _ := strings.Cut(w, " ")
		_, quoted, _ := strings.Cut(rest, " ")
		text, err := strconv.Unquote(quoted)
		if code != "299" || err != nil {
			t.Errorf("Warning header %q: not 299 - \"text\" (%v)", w, err)
			continue
		}
		texts = append(texts, text)
	}
	return texts
}

// checkPruned fails unless the stored cluster has no spec.pause.
func checkPruned(t *testing.T, k *kube, name string) {
	t.Helper()
	var obj struct{ Spec map[string]any }
	unmarshal(t, k.mustKubectl(t, "", "get", "etcd", name, "-n", nsRejected, "-o", "json").stdout, &obj)
	if _, ok := obj.Spec["pause"]; ok || obj.Spec["size"] != float64(3) {
		t.Errorf("stored spec %v: want size 3 and no pause (pruned)", obj.Spec)
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

// testBackupRejected: an EtcdBackup that names its cluster twice, or not at
// all, or a storage type nobody serves, is refused at admission.
func testBackupRejected(t *testing.T, k *kube) {
	const s3 = "s3: {path: bucket/etcd.backup, awsSecret: aws}"
	for _, c := range []struct {
		name, spec, want string
	}{
		{"endpoints-and-cluster", `{etcdEndpoints: ["http://a:2379"], clusterName: a, storageType: S3, ` + s3 + `}`, "name the cluster by etcdEndpoints or by clusterName, exactly one of them"},
		{"no-cluster", `{storageType: S3, ` + s3 + `}`, "name the cluster by etcdEndpoints or by clusterName, exactly one of them"},
		{"storage-type", `{clusterName: a, storageType: FTP}`, `spec.storageType: Unsupported value: "FTP"`},
		{"negative-interval", `{clusterName: a, storageType: S3, backupPolicy: {backupIntervalInSecond: -1}, ` + s3 + `}`, "spec.backupPolicy.backupIntervalInSecond in body should be greater than or equal to 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: %q}\nspec: %s\n", v1beta2.APIVersion, v1beta2.KindBackup, c.name, c.spec)
			r := k.kubectl(t, doc, "apply", "-n", nsRejected, "-f", "-")
			if r.code == 0 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("kubectl apply: want a refusal naming %q, got:\n%s\n(document:\n%s)", c.want, r, doc)
			}
		})
	}
}

// testRestoreAdmission: an EtcdRestore whose name differs from its
// cluster's is stored (its status then says what is wrong, rather than a
// kubectl error a GitOps tool may swallow), and an EtcdCluster's
// spec.restore with two sources is refused.
func testRestoreAdmission(t *testing.T, k *kube) {
	doc := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: mismatched}\nspec: {etcdCluster: {name: other}, backupStorageType: S3, s3: {path: b/k, awsSecret: aws}}\n",
		v1beta2.APIVersion, v1beta2.KindRestore)
	noWarnings(t, k.mustKubectl(t, doc, "apply", "--validate=strict", "-n", nsRejected, "-f", "-"))

	doc = fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: two-sources}\nspec: {size: 3, restore: {s3: {path: b/k, awsSecret: aws}, backup: {name: nightly}}}\n",
		v1beta2.APIVersion, v1beta2.Kind)
	r := k.kubectl(t, doc, "apply", "-n", nsRejected, "-f", "-")
	if want := "give exactly one of s3, pvc and backup"; r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("kubectl apply: want a refusal naming %q, got:\n%s", want, r)
	}
}
