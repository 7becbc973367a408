package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const monitoringDir = "manifests/monitoring"

// monitoringAPI makes helm template render as for a cluster that serves
// the Prometheus Operator's API (Helm finds it by discovery when it
// installs).
var monitoringAPI = []string{"--api-versions", "monitoring.coreos.com/v1"}

// TestMonitoringCopies: the chart renders the monitoring objects from
// copies of manifests/monitoring (Helm reads nothing outside the chart),
// which must stay byte for byte the same ("make chart-monitoring" copies
// them).
func TestMonitoringCopies(t *testing.T) {
	root := testenv.ModuleRoot(t)
	source := filepath.Join(root, monitoringDir)
	if _, err := os.Stat(source); err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	// The kustomization itself is not an object.
	want := yamlFiles(t, source)
	delete(want, "kustomization.yaml")
	got := yamlFiles(t, filepath.Join(root, chartDir, "files", "monitoring"))
	compareFiles(t, want, got, monitoringDir, chartDir+"/files/monitoring", "make chart-monitoring")
}

// TestMonitoringGatedOnTheAPI: the monitoring objects are rendered only
// where the cluster serves monitoring.coreos.com/v1 (so an install on a
// cluster without the Prometheus Operator still works), and then they are
// exactly what kubectl kustomize manifests/monitoring renders, beside
// manifests/. monitoring.enabled=false leaves them all out, and
// monitoring.dashboard.enabled=false the dashboard's ConfigMap.
func TestMonitoringGatedOnTheAPI(t *testing.T) {
	base := kustomize(t, "manifests/")
	monitoring := kustomize(t, monitoringDir)
	if len(monitoring) == 0 {
		t.Fatalf("kubectl kustomize %s renders nothing", monitoringDir)
	}
	all := objects{}
	for _, o := range []objects{base, monitoring} {
		for k, v := range o {
			all[k] = v
		}
	}
	noDashboard := all.without(monitoring.ofKind("ConfigMap"))
	if len(noDashboard) != len(all)-1 {
		t.Fatalf("%s renders %d ConfigMaps, want 1 (the dashboard)", monitoringDir, len(all)-len(noDashboard))
	}

	for _, tc := range []struct {
		name   string
		args   []string
		want   objects
		reason string
	}{
		{"without the API", nil, base,
			"a cluster without the Prometheus Operator gets no object its API server would refuse"},
		{"without the API, asked for", []string{"--set", "monitoring.enabled=true"}, base,
			"the value cannot override the API's absence"},
		{"with the API", monitoringAPI, all,
			"the monitoring objects of manifests/monitoring, in the hook's namespace"},
		{"with the API, switched off", append([]string{"--set", "monitoring.enabled=false"}, monitoringAPI...), base,
			"monitoring.enabled=false"},
		{"with the API, no dashboard", append([]string{"--set", "monitoring.dashboard.enabled=false"}, monitoringAPI...), noDashboard,
			"monitoring.dashboard.enabled=false leaves the dashboard's ConfigMap out, and only it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := helmTemplate(t, append([]string{"--include-crds"}, tc.args...)...)
			if diff := diffObjects(tc.want, got); diff != "" {
				t.Errorf("%s: helm template %s (-kustomize +helm):\n%s", tc.reason, strings.Join(tc.args, " "), diff)
			}
		})
	}
}
