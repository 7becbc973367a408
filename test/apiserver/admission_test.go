package apiserver

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

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
	{name: "hibernation-backup-empty", spec: `{size: 3, hibernated: true, hibernation: {backup: ""}}`,
		want: []string{`spec.hibernation.backup: Invalid value: "": spec.hibernation.backup in body should be at least 1 chars long`}},
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
	{name: "hibernated-through-backup", spec: `{size: 3, hibernated: true, hibernation: {backup: nightly}}`},
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
