package monitoring

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v2"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

func readYAML(t *testing.T, rel string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

type relabeling struct {
	Action       string   `yaml:"action"`
	SourceLabels []string `yaml:"sourceLabels"`
	TargetLabel  string   `yaml:"targetLabel"`
	Replacement  string   `yaml:"replacement"`
}

type labelSelector struct {
	MatchLabels      map[string]string `yaml:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `yaml:"key"`
		Operator string   `yaml:"operator"`
		Values   []string `yaml:"values"`
	} `yaml:"matchExpressions"`
}

type endpoint struct {
	Port        string       `yaml:"port"`
	Scheme      string       `yaml:"scheme"`
	Path        string       `yaml:"path"`
	HonorLabels bool         `yaml:"honorLabels"`
	Relabelings []relabeling `yaml:"relabelings"`
}

// targetLabels: what the relabelings set, label by label: the source label
// it is copied from, or the fixed replacement.
func targetLabels(rs []relabeling) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		if r.Action != "" && r.Action != "replace" {
			continue
		}
		if len(r.SourceLabels) > 0 {
			out[r.TargetLabel] = strings.Join(r.SourceLabels, ";")
		} else {
			out[r.TargetLabel] = r.Replacement
		}
	}
	return out
}

// TestPodMonitorFindsTheMembers: the PodMonitor selects the labels the
// hook gives every member Pod, in every namespace, on the plain-HTTP port
// named metrics, and gives each series the labels the alerts and the
// dashboard group by.
func TestPodMonitorFindsTheMembers(t *testing.T) {
	var pm struct {
		Kind string `yaml:"kind"`
		Spec struct {
			NamespaceSelector struct {
				Any bool `yaml:"any"`
			} `yaml:"namespaceSelector"`
			Selector  labelSelector `yaml:"selector"`
			Endpoints []endpoint    `yaml:"podMetricsEndpoints"`
		} `yaml:"spec"`
	}
	readYAML(t, monitoringDir+"/podmonitor.yaml", &pm)
	if pm.Kind != "PodMonitor" {
		t.Fatalf("kind %q, want PodMonitor", pm.Kind)
	}
	if !pm.Spec.NamespaceSelector.Any {
		t.Errorf("namespaceSelector.any is not true: EtcdClusters live in any namespace")
	}
	if diff := cmp.Diff(map[string]string{etcdcluster.LabelApp: "etcd"}, pm.Spec.Selector.MatchLabels); diff != "" {
		t.Errorf("matchLabels are not the members' %s label (-want +got):\n%s", etcdcluster.LabelApp, diff)
	}
	if e := pm.Spec.Selector.MatchExpressions; len(e) != 1 || e[0].Key != etcdcluster.LabelCluster || e[0].Operator != "Exists" {
		t.Errorf("matchExpressions %+v, want only %s Exists", e, etcdcluster.LabelCluster)
	}
	if len(pm.Spec.Endpoints) != 1 {
		t.Fatalf("%d podMetricsEndpoints, want 1", len(pm.Spec.Endpoints))
	}
	ep := pm.Spec.Endpoints[0]
	// plan/etcdcluster/pod.go names the member's port 2381 "metrics".
	if ep.Port != "metrics" || ep.Scheme != "http" || ep.Path != "/metrics" {
		t.Errorf("endpoint port %q scheme %q path %q, want metrics, http, /metrics (port %d)", ep.Port, ep.Scheme, ep.Path, etcdcluster.MetricsPort)
	}
	want := map[string]string{
		"namespace":    "__meta_kubernetes_namespace",
		"etcd_cluster": "__meta_kubernetes_pod_label_" + etcdcluster.LabelCluster,
		"pod":          "__meta_kubernetes_pod_name",
		"job":          membersJob,
	}
	if diff := cmp.Diff(want, targetLabels(ep.Relabelings)); diff != "" {
		t.Errorf("relabelings (-want +got):\n%s", diff)
	}
}

type servicePort struct {
	Name       string `yaml:"name"`
	TargetPort string `yaml:"targetPort"`
}

// TestServiceMonitorFindsTheHook: the ServiceMonitor selects the hook's
// Service, in its namespace, on the Service's plain-HTTP port, and keeps
// the per-object series' own namespace label.
func TestServiceMonitorFindsTheHook(t *testing.T) {
	var svc struct {
		Metadata struct {
			Namespace string            `yaml:"namespace"`
			Labels    map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Ports []servicePort `yaml:"ports"`
		} `yaml:"spec"`
	}
	readYAML(t, "manifests/hook/service.yaml", &svc)
	var sm struct {
		Kind string `yaml:"kind"`
		Spec struct {
			NamespaceSelector struct {
				MatchNames []string `yaml:"matchNames"`
			} `yaml:"namespaceSelector"`
			Selector  labelSelector `yaml:"selector"`
			Endpoints []endpoint    `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	readYAML(t, monitoringDir+"/servicemonitor.yaml", &sm)
	if sm.Kind != "ServiceMonitor" {
		t.Fatalf("kind %q, want ServiceMonitor", sm.Kind)
	}
	if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{svc.Metadata.Namespace}) {
		t.Errorf("namespaceSelector.matchNames %v, want [%s]", sm.Spec.NamespaceSelector.MatchNames, svc.Metadata.Namespace)
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 {
		t.Errorf("the selector has no matchLabels")
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Metadata.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not a label of the hook's Service (%v)", k, v, svc.Metadata.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%d endpoints, want 1", len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	// The hook serves /metrics on its plain-HTTP port (--addr), which the
	// container and the Service call http.
	i := slices.IndexFunc(svc.Spec.Ports, func(p servicePort) bool { return p.Name == ep.Port })
	if i < 0 || svc.Spec.Ports[i].TargetPort != "http" {
		t.Errorf("endpoint port %q is not the Service's port to the container's http port (%+v)", ep.Port, svc.Spec.Ports)
	}
	if ep.Scheme != "http" || ep.Path != "/metrics" {
		t.Errorf("endpoint scheme %q path %q, want http, /metrics", ep.Scheme, ep.Path)
	}
	if !ep.HonorLabels {
		t.Errorf("honorLabels is not true: the per-object series' namespace label would become exported_namespace")
	}
	if diff := cmp.Diff(map[string]string{"job": hookJob}, targetLabels(ep.Relabelings)); diff != "" {
		t.Errorf("relabelings (-want +got):\n%s", diff)
	}
}

// TestNotInTheOperatorsInstall: the monitoring objects are applied on
// their own. No install of the operator includes them, and no
// CompositeController has a child of the Prometheus Operator's kinds: a
// child kind without its CRD keeps a CompositeController from starting.
// Their own kustomization lists every one of them.
func TestNotInTheOperatorsInstall(t *testing.T) {
	root := testenv.ModuleRoot(t)
	for _, k := range []string{"manifests/kustomization.yaml", "manifests/tls/kustomization.yaml", "manifests/tls/cert-manager/kustomization.yaml"} {
		var kust struct {
			Resources  []string `yaml:"resources"`
			Components []string `yaml:"components"`
		}
		readYAML(t, k, &kust)
		for _, r := range append(kust.Resources, kust.Components...) {
			if strings.Contains(r, "monitoring") {
				t.Errorf("%s includes %s: the monitoring objects must stay optional", k, r)
			}
		}
	}

	controllers, err := filepath.Glob(filepath.Join(root, "manifests", "*", "*compositecontroller.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob(filepath.Join(root, "manifests", "tls", "*", "*compositecontroller.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	controllers = append(controllers, more...)
	if len(controllers) == 0 {
		t.Fatal("no CompositeController under manifests/")
	}
	for _, f := range controllers {
		rel, _ := filepath.Rel(root, f)
		var cc struct {
			Spec struct {
				ChildResources []struct {
					APIVersion string `yaml:"apiVersion"`
					Resource   string `yaml:"resource"`
				} `yaml:"childResources"`
			} `yaml:"spec"`
		}
		readYAML(t, rel, &cc)
		for _, c := range cc.Spec.ChildResources {
			if strings.HasPrefix(c.APIVersion, "monitoring.coreos.com/") {
				t.Errorf("%s: child %s %s: Metacontroller would not start this controller without the Prometheus Operator's CRDs", rel, c.APIVersion, c.Resource)
			}
		}
	}

	var kust struct {
		Resources []string `yaml:"resources"`
	}
	readYAML(t, monitoringDir+"/kustomization.yaml", &kust)
	files, err := filepath.Glob(filepath.Join(root, monitoringDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Sorted(slices.Values(kust.Resources))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s/kustomization.yaml does not list every object of the directory (-files +listed):\n%s", monitoringDir, diff)
	}
}
