package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v2"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const (
	dashboardFile          = monitoringDir + "/dashboard.json"
	dashboardConfigMapFile = monitoringDir + "/dashboard-configmap.yaml"
	// dashboardKey is the file name Grafana's sidecar writes the dashboard
	// to.
	dashboardKey = "etcd-hook.json"
	// kubectl apply (client-side) keeps the whole object in an annotation,
	// and annotations are limited to 256 KiB altogether.
	maxDashboardBytes = 256 << 10
)

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string          `json:"expr"`
		RefID      string          `json:"refId"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	// A collapsed row holds its panels.
	Panels []panel `json:"panels"`
}

type variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

// templateDatasource is the data source every panel and query uses: the
// dashboard's datasource variable.
const templateDatasource = `{"type":"prometheus","uid":"${datasource}"}`

func readDashboard(t *testing.T) ([]byte, dashboard) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s does not parse: %v", dashboardFile, err)
	}
	return raw, d
}

// allPanels flattens the rows' panels.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// gridVariables are Grafana's own variables, replaced by a duration before
// Prometheus parses an expression.
var gridVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// labelValues is Grafana's variable query label_values(<selector>, <label>).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// TestDashboard: dashboard.json parses, is templated on a data source, a
// namespace and an EtcdCluster, lays its panels on Grafana's 24 columns,
// and every query parses as PromQL, names only metrics the hook or etcd
// exports, and filters them by the variables; every per-object series of
// the hook has a panel.
func TestDashboard(t *testing.T) {
	raw, d := readDashboard(t)
	if len(raw) > maxDashboardBytes {
		t.Errorf("%s is %d bytes: kubectl apply cannot keep more than %d in its annotation", dashboardFile, len(raw), maxDashboardBytes)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both must be set (the uid keeps links stable)", d.UID, d.Title)
	}

	var queries []string
	var where []string
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v := vars["datasource"]; v.Type != "datasource" || v.Query != "prometheus" {
		t.Errorf("variable datasource: %+v, want a datasource variable of type prometheus", v)
	}
	for _, name := range []string{"namespace", "cluster"} {
		v, ok := vars[name]
		if !ok || v.Type != "query" {
			t.Errorf("variable %s: %+v, want a query variable", name, v)
			continue
		}
		q, _ := v.Query.(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q, want label_values(<selector>, <label>)", name, q)
			continue
		}
		queries = append(queries, m[1])
		where = append(where, "variable "+name)
	}

	ids := map[int]string{}
	panels := allPanels(d.Panels)
	for _, p := range panels {
		if p.ID == 0 {
			t.Errorf("panel %q has no id", p.Title)
		} else if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share the id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v is not within Grafana's 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if !sameJSON(p.Datasource, templateDatasource) {
			t.Errorf("panel %q: datasource %s, want %s", p.Title, p.Datasource, templateDatasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !sameJSON(q.Datasource, templateDatasource) {
				t.Errorf("panel %q query %s: datasource %s, want %s", p.Title, q.RefID, q.Datasource, templateDatasource)
			}
			queries = append(queries, gridVariables.Replace(q.Expr))
			where = append(where, fmt.Sprintf("panel %q query %s", p.Title, q.RefID))
		}
	}

	known := exportedMetrics(t)
	hookObjects := slices.DeleteFunc(hookMetricNames(t), func(n string) bool { return !perObject(n) })
	if len(hookObjects) == 0 {
		t.Fatalf("found no per-object series (etcd_cluster_*, etcd_backup_*, etcd_restore_*) in %s/", serverDir)
	}
	shown := map[string]bool{}
	for i, p := range parsePromQL(t, queries) {
		if p.Error != "" {
			t.Errorf("%s: %s", where[i], p.Error)
			continue
		}
		if len(p.Metrics) == 0 {
			t.Errorf("%s: names no metric", where[i])
		}
		for _, m := range p.Metrics {
			if _, ok := known[m]; !ok {
				t.Errorf("%s: %s is exported neither by the hook nor by etcd", where[i], m)
			}
			shown[m] = true
		}
		if strings.HasPrefix(where[i], "variable ") {
			continue
		}
		for _, s := range p.Selectors {
			if err := filteredByVariables(s, known[s.Metric]); err != nil {
				t.Errorf("%s: %v", where[i], err)
			}
		}
	}
	for _, m := range hookObjects {
		if !shown[m] {
			t.Errorf("no panel shows %s, which the hook exports", m)
		}
	}
	t.Logf("%d panels, %d queries", len(panels), len(queries))
}

func perObject(name string) bool {
	return strings.HasPrefix(name, "etcd_cluster_") || strings.HasPrefix(name, "etcd_backup_") || strings.HasPrefix(name, "etcd_restore_")
}

// filteredByVariables: a query shows the chosen EtcdCluster, its members,
// the namespace's backups and restores, or the hook, never series of some
// other cluster or of another etcd that Prometheus scrapes.
func filteredByVariables(s selector, source string) error {
	want := map[string]string{}
	switch {
	case strings.HasPrefix(s.Metric, "etcd_cluster_"):
		want = map[string]string{"job": "=" + hookJob, "namespace": "=$namespace", "name": "=$cluster"}
	case perObject(s.Metric):
		want = map[string]string{"job": "=" + hookJob, "namespace": "=$namespace"}
	case strings.HasPrefix(source, "the hook"):
		want = map[string]string{"job": "=" + hookJob}
	case strings.HasPrefix(source, "etcd "), s.Metric == "up" && s.Matchers["job"] == "="+membersJob:
		want = map[string]string{"job": "=" + membersJob, "namespace": "=$namespace", "etcd_cluster": "=$cluster"}
	case s.Metric == "up":
		want = map[string]string{"job": "=" + hookJob}
	}
	for label, m := range want {
		if s.Matchers[label] != m {
			return fmt.Errorf("selector of %s filters %s by %q, want %q", s.Metric, label, s.Matchers[label], m)
		}
	}
	return nil
}

func sameJSON(raw json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(raw, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return cmp.Equal(a, b)
}

const dashboardConfigMapHeader = `# The Grafana dashboard dashboard.json, for Grafana's dashboard sidecar
# (kube-prometheus-stack: grafana.sidecar.dashboards), which loads every
# ConfigMap labelled grafana_dashboard: "1": in every namespace when its
# searchNamespace is ALL, otherwise only in Grafana's own (apply it there).
#
# Generated from dashboard.json by
#   go test ./test/monitoring -run TestDashboardConfigMap -update
# Do not edit: edit dashboard.json (or export it from Grafana into it).
apiVersion: v1
kind: ConfigMap
metadata:
  name: etcd-hook-dashboard
  namespace: etcd-hook
  labels:
    app.kubernetes.io/name: etcd-hook
    grafana_dashboard: "1"
data:
  ` + dashboardKey + `: |
`

// dashboardConfigMap embeds the dashboard as a literal block, line for line.
func dashboardConfigMap(raw []byte) ([]byte, error) {
	if !bytes.HasSuffix(raw, []byte("\n")) || bytes.HasSuffix(raw, []byte("\n\n")) {
		return nil, fmt.Errorf("%s must end with exactly one newline, as a YAML literal block keeps it", dashboardFile)
	}
	var out bytes.Buffer
	out.WriteString(dashboardConfigMapHeader)
	for line := range strings.Lines(string(raw)) {
		if strings.TrimSpace(line) == "" {
			return nil, fmt.Errorf("%s has a blank line, which a YAML literal block would not keep as is", dashboardFile)
		}
		out.WriteString("    " + line)
	}
	return out.Bytes(), nil
}

// TestDashboardConfigMap: the ConfigMap the sidecar loads carries exactly
// dashboard.json, under the label the sidecar looks for.
func TestDashboardConfigMap(t *testing.T) {
	raw, _ := readDashboard(t)
	want, err := dashboardConfigMap(raw)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(testenv.ModuleRoot(t), dashboardConfigMapFile)
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s is not generated from %s; run go test ./test/monitoring -run TestDashboardConfigMap -update (-want +got):\n%s", dashboardConfigMapFile, dashboardFile, diff)
	}

	var cm struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(got, &cm); err != nil {
		t.Fatalf("%s: %v", dashboardConfigMapFile, err)
	}
	if cm.APIVersion != "v1" || cm.Kind != "ConfigMap" {
		t.Errorf("%s: %s %s, want v1 ConfigMap", dashboardConfigMapFile, cm.APIVersion, cm.Kind)
	}
	if l := cm.Metadata.Labels["grafana_dashboard"]; l != "1" {
		t.Errorf("%s: label grafana_dashboard %q, want \"1\" (the sidecar's default)", dashboardConfigMapFile, l)
	}
	if diff := cmp.Diff(string(raw), cm.Data[dashboardKey]); diff != "" {
		t.Errorf("%s: data[%s] is not %s (-file +ConfigMap):\n%s", dashboardConfigMapFile, dashboardKey, dashboardFile, diff)
	}
	if len(cm.Data) != 1 {
		t.Errorf("%s: %d data keys, want only %s", dashboardConfigMapFile, len(cm.Data), dashboardKey)
	}
}
