package charts

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

const (
	defaultNamespace = "etcd-hook"
	defaultImage     = "ghcr.io/etcdhook/etcd-hook:latest"
	testDigest       = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// TestValues renders the chart with one value changed at a time and
// compares it with the rendering it starts from (the defaults, or the
// HTTPS values) edited by hand the way values.yaml says the value works:
// each value changes what it says and nothing else.
func TestValues(t *testing.T) {
	tls := []string{"--set", "tls.enabled=true"}
	certManager := []string{"--set", "tls.enabled=true", "--set", "tls.certManager.enabled=true"}
	for _, tc := range []struct {
		name   string
		reason string
		base   []string // the rendering edit starts from
		args   []string // added to base
		edit   func(t *testing.T, o objects)
	}{
		{
			name:   "namespace.name",
			reason: "every namespaced object, the Namespace, the webhook URLs and the RBAC move to the namespace",
			args:   []string{"--set", "namespace.name=ops"},
			edit: func(t *testing.T, o objects) {
				moveNamespace(t, o, "ops", "https://etcd-hook.ops.svc:443")
				moveTLSHost(t, o, "ops")
			},
		},
		{
			name:   "namespace.name empty",
			reason: "the release's namespace is used",
			args:   []string{"--set", "namespace.name=", "--namespace", "ops"},
			edit: func(t *testing.T, o objects) {
				moveNamespace(t, o, "ops", "https://etcd-hook.ops.svc:443")
				moveTLSHost(t, o, "ops")
			},
		},
		{
			name:   "namespace.name with plain HTTP",
			reason: "the plain webhook URLs follow the namespace",
			base:   []string{"--set", "tls.enabled=false"},
			args:   []string{"--set", "namespace.name=ops"},
			edit:   func(t *testing.T, o objects) { moveNamespace(t, o, "ops", "http://etcd-hook.ops") },
		},
		{
			name:   "namespace.name over the release's namespace",
			reason: "an explicit namespace wins over helm --namespace",
			args:   []string{"--namespace", "ops"},
			edit:   func(t *testing.T, o objects) {},
		},
		{
			name:   "namespace.create=false",
			reason: "the Namespace object is left out, nothing else changes",
			args:   []string{"--set", "namespace.create=false"},
			edit:   func(t *testing.T, o objects) { remove(t, o, "v1 Namespace etcd-hook") },
		},
		{
			name:   "namespace.name with HTTPS",
			reason: "the HTTPS host, the endpointConfigs and the caBundle Secret's namespace follow the namespace",
			base:   tls,
			args:   []string{"--set", "namespace.name=ops"},
			edit: func(t *testing.T, o objects) {
				moveNamespace(t, o, "ops", "https://etcd-hook.ops.svc:443")
				moveTLSHost(t, o, "ops")
			},
		},
		{
			name:   "namespace.name with cert-manager",
			reason: "the Issuers and Certificates move too, and the certificate names the new host",
			base:   certManager,
			args:   []string{"--set", "namespace.name=ops"},
			edit: func(t *testing.T, o objects) {
				moveNamespace(t, o, "ops", "https://etcd-hook.ops.svc:443")
				moveTLSHost(t, o, "ops")
				cert := o.only(t, "Certificate", "etcd-hook-tls")
				at(t, cert, "spec").(map[string]any)["dnsNames"] = []any{"etcd-hook.ops.svc", "etcd-hook.ops.svc.cluster.local"}
			},
		},
		{
			name:   "image.repository and image.tag",
			reason: "the container's image and --agent-image, which backup runs start, are the same image",
			args:   []string{"--set", "image.repository=registry.example.com/etcd-hook", "--set", "image.tag=v0.2.0"},
			edit: func(t *testing.T, o objects) {
				setImage(t, o, "registry.example.com/etcd-hook:v0.2.0")
			},
		},
		{
			name:   "image.digest",
			reason: "a digest replaces the tag, in the image and in --agent-image",
			args:   []string{"--set", "image.tag=v0.2.0", "--set", "image.digest=" + testDigest},
			edit: func(t *testing.T, o objects) {
				setImage(t, o, "ghcr.io/etcdhook/etcd-hook@"+testDigest)
			},
		},
		{
			name:   "image.pullPolicy",
			reason: "the container's imagePullPolicy",
			args:   []string{"--set", "image.pullPolicy=IfNotPresent"},
			edit:   func(t *testing.T, o objects) { container(t, o)["imagePullPolicy"] = "IfNotPresent" },
		},
		{
			name:   "imagePullSecrets",
			reason: "the Pods' imagePullSecrets",
			args:   []string{"--set-json", `imagePullSecrets=[{"name":"regcred"}]`},
			edit: func(t *testing.T, o objects) {
				podSpec(t, o)["imagePullSecrets"] = []any{map[string]any{"name": "regcred"}}
			},
		},
		{
			name:   "replicas",
			reason: "the Deployment's replicas",
			args:   []string{"--set", "replicas=3"},
			edit:   func(t *testing.T, o objects) { at(t, deployment(t, o), "spec").(map[string]any)["replicas"] = 3 },
		},
		{
			name:   "sharding.enabled=false",
			reason: "no --peers, --peer-address or POD_IP, and no headless Service: every replica syncs whatever reaches it",
			args:   []string{"--set", "sharding.enabled=false"},
			edit: func(t *testing.T, o objects) {
				c := container(t, o)
				var args []any
				for _, a := range c["args"].([]any) {
					if s := a.(string); !strings.HasPrefix(s, "--peers=") && !strings.HasPrefix(s, "--peer-address=") {
						args = append(args, a)
					}
				}
				if len(args) != len(c["args"].([]any))-2 {
					t.Fatalf("the default rendering's args %v lack --peers or --peer-address", c["args"])
				}
				c["args"] = args
				delete(c, "env")
				o.only(t, "Service", "etcd-hook-peers")
				for k, obj := range o {
					if md := at(t, obj, "metadata").(map[string]any); md["name"] == "etcd-hook-peers" {
						delete(o, k)
					}
				}
			},
		},
		{
			name:   "resources",
			reason: "the container's resources, replaced as a whole when set with --set-json",
			args:   []string{"--set-json", `resources={"requests":{"cpu":"100m","memory":"96Mi"},"limits":{"memory":"256Mi"}}`},
			edit: func(t *testing.T, o objects) {
				container(t, o)["resources"] = map[string]any{
					"requests": map[string]any{"cpu": "100m", "memory": "96Mi"},
					"limits":   map[string]any{"memory": "256Mi"},
				}
			},
		},
		{
			name:   "resources null",
			reason: "no resources at all",
			args:   []string{"--set", "resources=null"},
			edit:   func(t *testing.T, o objects) { delete(container(t, o), "resources") },
		},
		{
			name:   "nodeSelector, tolerations, affinity, priorityClassName",
			reason: "the Pods' scheduling fields, as given",
			args: []string{
				"--set", "nodeSelector.kubernetes\\.io/os=linux",
				"--set-json", `tolerations=[{"key":"dedicated","operator":"Equal","value":"infra","effect":"NoSchedule"}]`,
				"--set-json", `affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"node-role.kubernetes.io/infra","operator":"Exists"}]}]}}}`,
				"--set", "priorityClassName=system-cluster-critical",
			},
			edit: func(t *testing.T, o objects) {
				spec := podSpec(t, o)
				spec["nodeSelector"] = map[string]any{"kubernetes.io/os": "linux"}
				spec["tolerations"] = []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}}
				spec["affinity"] = map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
					"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "node-role.kubernetes.io/infra", "operator": "Exists"}}}},
				}}}
				spec["priorityClassName"] = "system-cluster-critical"
			},
		},
		{
			name:   "podAnnotations",
			reason: "annotations on the Pod template only",
			args:   []string{"--set", "podAnnotations.example\\.com/team=storage"},
			edit: func(t *testing.T, o objects) {
				at(t, deployment(t, o), "spec", "template", "metadata").(map[string]any)["annotations"] = map[string]any{"example.com/team": "storage"}
			},
		},
		{
			name:   "extraArgs",
			reason: "appended after the chart's own flags",
			base:   tls,
			args:   []string{"--set", "extraArgs={--max-idle-etcd-conns=512,--shutdown-timeout=30s}"},
			edit: func(t *testing.T, o objects) {
				c := container(t, o)
				c["args"] = append(c["args"].([]any), "--max-idle-etcd-conns=512", "--shutdown-timeout=30s")
			},
		},
		{
			name:   "podDisruptionBudget.minAvailable",
			reason: "a percentage is passed as it is",
			args:   []string{"--set-string", "podDisruptionBudget.minAvailable=50%"},
			edit: func(t *testing.T, o objects) {
				at(t, o.only(t, "PodDisruptionBudget", "etcd-hook"), "spec").(map[string]any)["minAvailable"] = "50%"
			},
		},
		{
			name:   "podDisruptionBudget.enabled=false",
			reason: "no PodDisruptionBudget",
			args:   []string{"--set", "podDisruptionBudget.enabled=false"},
			edit:   func(t *testing.T, o objects) { remove(t, o, "policy/v1 PodDisruptionBudget etcd-hook/etcd-hook") },
		},
		{
			name:   "metacontroller.serviceAccount",
			reason: "the ClusterRoleBinding's subject",
			args:   []string{"--set", "metacontroller.serviceAccount.name=mc", "--set", "metacontroller.serviceAccount.namespace=mc-system"},
			edit: func(t *testing.T, o objects) {
				at(t, o.only(t, "ClusterRoleBinding", "etcd-hook-metacontroller"), "subjects").([]any)[0] = map[string]any{
					"kind": "ServiceAccount", "name": "mc", "namespace": "mc-system",
				}
			},
		},
		{
			name:   "rbac.create=false",
			reason: "no ClusterRole or ClusterRoleBinding",
			args:   []string{"--set", "rbac.create=false"},
			edit: func(t *testing.T, o objects) {
				remove(t, o, "rbac.authorization.k8s.io/v1 ClusterRole etcd-hook-metacontroller")
				remove(t, o, "rbac.authorization.k8s.io/v1 ClusterRoleBinding etcd-hook-metacontroller")
			},
		},
		{
			name:   "tls.secretName",
			reason: "the mounted Secret and the caBundle's Secret",
			base:   tls,
			args:   []string{"--set", "tls.secretName=hook-serving"},
			edit: func(t *testing.T, o objects) {
				at(t, podSpec(t, o), "volumes").([]any)[0].(map[string]any)["secret"].(map[string]any)["secretName"] = "hook-serving"
				for _, c := range o.ofKind("CompositeController") {
					cfg := at(t, c, "spec", "endpointConfigs").([]any)[0].(map[string]any)
					at(t, cfg, "caBundle", "secretRef").(map[string]any)["name"] = "hook-serving"
				}
			},
		},
		{
			name:   "tls.secretName with cert-manager",
			reason: "cert-manager writes the certificate into that Secret",
			base:   certManager,
			args:   []string{"--set", "tls.secretName=hook-serving"},
			edit: func(t *testing.T, o objects) {
				at(t, podSpec(t, o), "volumes").([]any)[0].(map[string]any)["secret"].(map[string]any)["secretName"] = "hook-serving"
				for _, c := range o.ofKind("CompositeController") {
					cfg := at(t, c, "spec", "endpointConfigs").([]any)[0].(map[string]any)
					at(t, cfg, "caBundle", "secretRef").(map[string]any)["name"] = "hook-serving"
				}
				at(t, o.only(t, "Certificate", "etcd-hook-tls"), "spec").(map[string]any)["secretName"] = "hook-serving"
			},
		},
		{
			name:   "tls.certManager durations and clusterDomain",
			reason: "the hook's certificate only; the CA keeps its ten years",
			base:   certManager,
			args: []string{"--set", "tls.certManager.duration=720h", "--set", "tls.certManager.renewBefore=240h",
				"--set", "tls.certManager.clusterDomain=example.internal"},
			edit: func(t *testing.T, o objects) {
				spec := at(t, o.only(t, "Certificate", "etcd-hook-tls"), "spec").(map[string]any)
				spec["duration"] = "720h"
				spec["renewBefore"] = "240h"
				spec["dnsNames"] = []any{"etcd-hook.etcd-hook.svc", "etcd-hook.etcd-hook.svc.example.internal"}
			},
		},
		{
			name:   "monitoring.labels",
			reason: "on the PodMonitor, ServiceMonitor and PrometheusRule, for a Prometheus that selects them by label; not on the dashboard",
			base:   monitoringAPI,
			args:   []string{"--set", "monitoring.labels.release=kube-prometheus-stack"},
			edit: func(t *testing.T, o objects) {
				for _, kind := range []string{"PodMonitor", "ServiceMonitor", "PrometheusRule"} {
					if len(o.ofKind(kind)) == 0 {
						t.Fatalf("no %s rendered", kind)
					}
					for _, obj := range o.ofKind(kind) {
						at(t, obj, "metadata", "labels").(map[string]any)["release"] = "kube-prometheus-stack"
					}
				}
			},
		},
		{
			name:   "monitoring.dashboard.namespace",
			reason: "the dashboard's ConfigMap goes to Grafana's namespace, the monitors and rules stay with the hook",
			base:   monitoringAPI,
			args:   []string{"--set", "monitoring.dashboard.namespace=grafana"},
			edit: func(t *testing.T, o objects) {
				dashboards := o.ofKind("ConfigMap")
				if len(dashboards) != 1 {
					t.Fatalf("%d ConfigMaps rendered, want the dashboard's", len(dashboards))
				}
				for k, obj := range dashboards {
					delete(o, k)
					at(t, obj, "metadata").(map[string]any)["namespace"] = "grafana"
					o[objectKey(obj)] = obj
				}
			},
		},
		{
			name:   "namespace.name with monitoring",
			reason: "the monitoring objects move too, and the ServiceMonitor looks for the hook's Service there",
			base:   monitoringAPI,
			args:   []string{"--set", "namespace.name=ops"},
			edit: func(t *testing.T, o objects) {
				moveNamespace(t, o, "ops", "https://etcd-hook.ops.svc:443")
				moveTLSHost(t, o, "ops")
				for _, sm := range o.ofKind("ServiceMonitor") {
					at(t, sm, "spec", "namespaceSelector").(map[string]any)["matchNames"] = []any{"ops"}
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := deepCopy(helmTemplate(t, tc.base...))
			tc.edit(t, want)
			got := helmTemplate(t, append(append([]string{}, tc.base...), tc.args...)...)
			if diff := diffObjects(want, got); diff != "" {
				t.Errorf("%s: helm template %s is not the base rendering %v edited as values.yaml says (-want +got):\n%s",
					tc.reason, strings.Join(tc.args, " "), tc.base, diff)
			}
		})
	}
}

// TestValuesRefused: values the chart cannot render faithfully are refused
// with a message that names the value, by the schema or by the templates.
func TestValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr []string // each must be in Helm's error
		reason  string
	}{
		{"misspelt value", []string{"--set", "replica=3"}, []string{"additional properties 'replica' not allowed"},
			"an unknown value would be ignored silently"},
		{"misspelt nested value", []string{"--set", "tls.enable=true"}, []string{"/tls", "additional properties 'enable' not allowed"},
			"HTTPS would silently stay off"},
		{"replicas not a number", []string{"--set-string", "replicas=two"}, []string{"/replicas", "want integer"},
			"the Deployment would be refused by the API server"},
		{"unknown pull policy", []string{"--set", "image.pullPolicy=Sometimes"}, []string{"/image/pullPolicy", "must be one of"},
			"the Deployment would be refused by the API server"},
		{"digest that is not one", []string{"--set", "image.digest=latest"}, []string{"/image/digest", "does not match pattern"},
			"the image reference would not parse"},
		{"namespace not a DNS label", []string{"--set", "namespace.name=Bad_NS"}, []string{"/namespace/name", "does not match pattern"},
			"the Namespace would be refused by the API server"},
		{"negative minAvailable", []string{"--set", "podDisruptionBudget.minAvailable=-1"}, []string{"/podDisruptionBudget/minAvailable"},
			"the PodDisruptionBudget would be refused by the API server"},
		{"sharding not a switch", []string{"--set-string", "sharding.enabled=yes"}, []string{"/sharding/enabled", "want boolean"},
			"the chart would render --peers or not from a string"},
		{"extraArgs not a flag", []string{"--set", "extraArgs={-v}"}, []string{"/extraArgs/0", "does not match pattern '^--'"},
			"the hook takes only flags"},
		{"extraArgs with --agent-image", []string{"--set", "extraArgs={--agent-image=example.com/other:v1}"},
			[]string{"extraArgs: --agent-image=example.com/other:v1 is set by the chart"},
			"backup runs would start another image than the hook's"},
		{"extraArgs with a TLS flag", []string{"--set", "extraArgs={--tls-addr=:9443}"},
			[]string{"extraArgs: --tls-addr=:9443 is set by the chart"},
			"the Service's https port would point at nothing"},
		{"extraArgs with --peers", []string{"--set", "extraArgs={--peers=10.0.0.1}"},
			[]string{"extraArgs: --peers=10.0.0.1 is set by the chart"},
			"replicas with two lists of peers would disagree on which owns a cluster"},
		{"cert-manager without TLS", []string{"--set", "tls.enabled=false", "--set", "tls.certManager.enabled=true"},
			[]string{"tls.certManager.enabled needs tls.enabled"},
			"a certificate that nothing serves, and webhooks left on plain HTTP"},
		{"certificate duration not a duration", []string{"--set", "tls.enabled=true", "--set", "tls.certManager.enabled=true", "--set", "tls.certManager.duration=90d"},
			[]string{"/tls/certManager/duration", "does not match pattern"},
			"cert-manager would refuse the Certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helmTemplateErr(t, tc.args...)
			if err == nil {
				t.Fatalf("helm template %s rendered; want it refused (%s)", strings.Join(tc.args, " "), tc.reason)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("helm template %s: the error does not say %q (%s):\n%v", strings.Join(tc.args, " "), want, tc.reason, err)
				}
			}
		})
	}
}

// moveNamespace edits a rendering as namespace.name=ns renders it: every
// namespaced object in ns (under its new key), the Namespace named ns, and
// every webhook URL on hookURL.
func moveNamespace(t *testing.T, o objects, ns, hookURL string) {
	t.Helper()
	if obj, ok := o["v1 Namespace "+defaultNamespace]; ok {
		delete(o, "v1 Namespace "+defaultNamespace)
		at(t, obj, "metadata").(map[string]any)["name"] = ns
		o[objectKey(obj)] = obj
	}
	for _, k := range o.keys() {
		obj := o[k]
		md := at(t, obj, "metadata").(map[string]any)
		if md["namespace"] == nil {
			continue
		}
		delete(o, k)
		md["namespace"] = ns
		o[objectKey(obj)] = obj
	}
	// The replicas find each other through the headless Service there.
	for _, d := range o.ofKind("Deployment") {
		for _, c := range at(t, d, "spec", "template", "spec", "containers").([]any) {
			args := c.(map[string]any)["args"].([]any)
			for i, a := range args {
				if a == "--peers=etcd-hook-peers."+defaultNamespace+".svc" {
					args[i] = "--peers=etcd-hook-peers." + ns + ".svc"
				}
			}
		}
	}
	for _, c := range o.ofKind("CompositeController") {
		for name, hook := range at(t, c, "spec", "hooks").(map[string]any) {
			wh := at(t, hook, "webhook").(map[string]any)
			url := wh["url"].(string)
			path := url[strings.Index(url[len("https://"):], "/")+len("https://"):]
			if path == "" {
				t.Fatalf("%s: hooks.%s.webhook.url %q has no path", objectKey(c), name, url)
			}
			wh["url"] = hookURL + path
		}
	}
}

// moveTLSHost edits the endpointConfigs entries of the CompositeControllers
// as namespace.name=ns renders them with tls.enabled: the host, and the
// namespace of the caBundle's Secret.
func moveTLSHost(t *testing.T, o objects, ns string) {
	t.Helper()
	for _, c := range o.ofKind("CompositeController") {
		cfg := at(t, c, "spec", "endpointConfigs").([]any)[0].(map[string]any)
		cfg["host"] = "etcd-hook." + ns + ".svc:443"
		at(t, cfg, "caBundle", "secretRef").(map[string]any)["namespace"] = ns
	}
}

// setImage sets the hook's image, and --agent-image with it.
func setImage(t *testing.T, o objects, image string) {
	t.Helper()
	c := container(t, o)
	c["image"] = image
	args := c["args"].([]any)
	for i, a := range args {
		if strings.HasPrefix(a.(string), "--agent-image=") {
			args[i] = "--agent-image=" + image
			return
		}
	}
	t.Fatalf("no --agent-image in %v", args)
}

func deployment(t *testing.T, o objects) map[string]any {
	t.Helper()
	return o.only(t, "Deployment", "etcd-hook")
}

func podSpec(t *testing.T, o objects) map[string]any {
	t.Helper()
	return at(t, deployment(t, o), "spec", "template", "spec").(map[string]any)
}

// container is the hook's container.
func container(t *testing.T, o objects) map[string]any {
	t.Helper()
	containers := at(t, podSpec(t, o), "containers").([]any)
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	return containers[0].(map[string]any)
}

// remove deletes the object under key, which must be there.
func remove(t *testing.T, o objects, key string) {
	t.Helper()
	if _, ok := o[key]; !ok {
		t.Fatalf("no %s to remove; rendered: %s", key, strings.Join(o.keys(), ", "))
	}
	delete(o, key)
}

// at is lookup that fails the test when the path is absent.
func at(t *testing.T, v any, path ...string) any {
	t.Helper()
	got := lookup(v, path...)
	if got == nil {
		s := fmt.Sprint(v)
		if len(s) > 200 {
			s = s[:200] + "…"
		}
		t.Fatalf("no %s in %s", strings.Join(path, "."), s)
	}
	return got
}

// deepCopy copies a rendering, so that a test edits its own.
func deepCopy(o objects) objects {
	out := make(objects, len(o))
	for k, obj := range o {
		out[k] = copyValue(obj).(map[string]any)
	}
	return out
}

func copyValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := maps.Clone(v)
		for k, e := range m {
			m[k] = copyValue(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = copyValue(e)
		}
		return s
	default:
		return v
	}
}
