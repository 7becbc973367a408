package monitoring

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v2"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const (
	prometheusRuleFile = monitoringDir + "/prometheusrule.yaml"
	// rulesFile is the plain rule file promtool reads: the PrometheusRule's
	// spec, which is exactly a rule file's top level (groups).
	rulesFile = "testdata/rules.yaml"
	// unitTests are promtool's unit tests of the rules.
	unitTests = "tests/*.yaml"

	// alertsRunbookURL is the alerts runbook, where each alert has a
	// section named after it. test/docs checks that each section exists.
	alertsRunbookURL = "https://github.com/etcdhook/etcd-hook/blob/main/docs/alerts.md"

	// etcdGroup holds the alerts on etcd's own metrics; the others are on
	// the hook's.
	etcdGroup = "etcd"
)

type ruleGroups struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval,omitempty"`
	Rules    []rule `yaml:"rules"`
}

type rule struct {
	Alert       string            `yaml:"alert,omitempty"`
	Record      string            `yaml:"record,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

type prometheusRule struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec ruleGroups `yaml:"spec"`
}

const rulesFileHeader = `# Generated from ` + prometheusRuleFile + ` (its spec) by
#   go test ./test/monitoring -run TestRulesFile -update
# Do not edit: promtool checks and unit-tests this plain rule file in place
# of the PrometheusRule, which it cannot read (make test-monitoring).
`

// plainRules cuts the PrometheusRule's spec out of its text, comments and
// all, one indentation level less: a rule file that reads like the object
// and whose line numbers promtool reports are easy to find there.
func plainRules(object []byte) ([]byte, error) {
	lines := strings.SplitAfter(string(object), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.TrimRight(l, "\n") == "spec:" })
	if start < 0 {
		return nil, fmt.Errorf("no top-level spec: line")
	}
	var out bytes.Buffer
	out.WriteString(rulesFileHeader)
	for i, l := range lines[start+1:] {
		switch {
		case strings.TrimSpace(l) == "":
			out.WriteString(l)
		case strings.HasPrefix(l, "  "):
			out.WriteString(l[2:])
		default:
			return nil, fmt.Errorf("line %d: spec must be the last top-level key, found %q", start+2+i, strings.TrimSpace(l))
		}
	}
	return out.Bytes(), nil
}

func readRules(t *testing.T) (prometheusRule, ruleGroups) {
	t.Helper()
	root := testenv.ModuleRoot(t)
	objectText, err := os.ReadFile(filepath.Join(root, prometheusRuleFile))
	if err != nil {
		t.Fatal(err)
	}
	var object prometheusRule
	if err := yaml.UnmarshalStrict(objectText, &object); err != nil {
		t.Fatalf("%s: %v", prometheusRuleFile, err)
	}
	plainText, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatalf("%v (go test ./test/monitoring -run TestRulesFile -update writes it)", err)
	}
	var plain ruleGroups
	if err := yaml.UnmarshalStrict(plainText, &plain); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return object, plain
}

// TestRulesFile: testdata/rules.yaml, which promtool checks, is the
// PrometheusRule's spec, byte for byte (but for one indentation level and
// a header) and rule for rule.
func TestRulesFile(t *testing.T) {
	root := testenv.ModuleRoot(t)
	objectText, err := os.ReadFile(filepath.Join(root, prometheusRuleFile))
	if err != nil {
		t.Fatal(err)
	}
	want, err := plainRules(objectText)
	if err != nil {
		t.Fatalf("%s: %v", prometheusRuleFile, err)
	}
	if *update {
		if err := os.WriteFile(rulesFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s is not the spec of %s; run go test ./test/monitoring -run TestRulesFile -update (-want +got):\n%s", rulesFile, prometheusRuleFile, diff)
	}

	object, plain := readRules(t)
	if object.APIVersion != "monitoring.coreos.com/v1" || object.Kind != "PrometheusRule" {
		t.Errorf("%s: %s %s, want monitoring.coreos.com/v1 PrometheusRule", prometheusRuleFile, object.APIVersion, object.Kind)
	}
	if diff := cmp.Diff(object.Spec, plain); diff != "" {
		t.Errorf("%s's rules differ from the PrometheusRule's (-PrometheusRule +rules file):\n%s", rulesFile, diff)
	}
	if len(plain.Groups) == 0 {
		t.Errorf("%s has no rule groups", rulesFile)
	}
}

// TestRuleMetricsExported: every metric a rule names is one the hook
// registers, one every etcd release serves, up, or one a rule of the file
// records.
func TestRuleMetricsExported(t *testing.T) {
	_, rules := readRules(t)
	known := exportedMetrics(t)
	var exprs, names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			names = append(names, r.Alert+r.Record)
			if r.Record != "" {
				known[r.Record] = "recorded by " + rulesFile
			}
		}
	}
	for i, p := range parsePromQL(t, exprs) {
		if p.Error != "" {
			t.Errorf("%s: %s", names[i], p.Error)
			continue
		}
		if len(p.Metrics) == 0 {
			t.Errorf("%s: names no metric", names[i])
		}
		for _, m := range p.Metrics {
			if _, ok := known[m]; !ok {
				t.Errorf("%s: %s is exported neither by the hook nor by etcd", names[i], m)
			}
		}
		// Each selector names the job of its targets, so that another
		// etcd scraped by the same Prometheus (the Kubernetes control
		// plane's) never feeds these alerts.
		for _, s := range p.Selectors {
			if strings.HasSuffix(known[s.Metric], rulesFile) {
				continue
			}
			if job := s.Matchers["job"]; job != "="+membersJob && job != "="+hookJob {
				t.Errorf("%s: selector of %s has job matcher %q, want =%s or =%s", names[i], s.Metric, job, membersJob, hookJob)
			}
		}
	}
}

// notPerObject are the alerts about the hook itself, which name no
// namespace and no EtcdCluster.
var notPerObject = map[string]string{
	"EtcdHookDown":          "no hook replica is up: there is no object to name",
	"EtcdHookRequestErrors": "errors by route, over every object",
}

// TestAlertsDocumented: every alert has a severity, a summary and a
// description that name the object (namespace and EtcdCluster, EtcdBackup
// or EtcdRestore), and a runbook_url that is its own section of the alerts
// runbook, docs/alerts.md. That the section is there is test/docs's to
// check, with every other link into the documentation; it runs in
// "make test", where this package does not.
func TestAlertsDocumented(t *testing.T) {
	_, rules := readRules(t)
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if seen[r.Alert] {
				t.Errorf("%s: alert defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, k := range []string{"summary", "description"} {
				text := r.Annotations[k]
				if text == "" {
					t.Errorf("%s: no %s", r.Alert, k)
					continue
				}
				if _, ok := notPerObject[r.Alert]; ok {
					continue
				}
				// etcd's series name the cluster etcd_cluster (the
				// PodMonitor's label); the hook's, name.
				object := "{{ $labels.name }}"
				if g.Name == etcdGroup {
					object = "{{ $labels.etcd_cluster }}"
				}
				if !strings.Contains(text, "{{ $labels.namespace }}/"+object) {
					t.Errorf("%s: %s %q does not name the object as {{ $labels.namespace }}/%s", r.Alert, k, text, object)
				}
			}
			url := r.Annotations["runbook_url"]
			base, anchor, ok := strings.Cut(url, "#")
			if !ok || base != alertsRunbookURL {
				t.Errorf("%s: runbook_url %q, want %s#<section>", r.Alert, url, alertsRunbookURL)
				continue
			}
			// GitHub's anchor of a heading "## <alert>".
			if anchor != strings.ToLower(r.Alert) {
				t.Errorf("%s: runbook_url anchor %q, want the alert's own section %q", r.Alert, anchor, strings.ToLower(r.Alert))
			}
		}
	}
	if len(seen) == 0 {
		t.Fatalf("%s has no alert", rulesFile)
	}
}

// promtool's unit test files, as far as this test reads them.
type unitTestFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestEveryAlertUnitTested: promtool's unit tests load the rule file, and
// have, for every alert, a case where it fires and one where it stays
// quiet; and they test no alert that does not exist. promtool checks that
// the cases hold (make test-monitoring).
func TestEveryAlertUnitTested(t *testing.T) {
	_, rules := readRules(t)
	files, err := filepath.Glob(unitTests)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no promtool unit tests %s", unitTests)
	}
	firing, quiet := map[string]int{}, map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var u unitTestFile
		if err := yaml.Unmarshal(b, &u); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want := filepath.ToSlash(mustRel(t, filepath.Dir(f), rulesFile))
		if !slices.Equal(u.RuleFiles, []string{want}) {
			t.Errorf("%s: rule_files %q, want [%s]", f, u.RuleFiles, want)
		}
		for _, tc := range u.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname]++
				} else {
					quiet[a.Alertname]++
				}
			}
		}
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if firing[r.Alert] == 0 {
				t.Errorf("%s: no promtool case where it fires", r.Alert)
			}
			if quiet[r.Alert] == 0 {
				t.Errorf("%s: no promtool case where it stays quiet", r.Alert)
			}
		}
	}
	for name := range mergeKeys(firing, quiet) {
		if !alerts[name] {
			t.Errorf("promtool cases test %q, which is no alert of %s", name, rulesFile)
		}
	}
	t.Logf("%d alerts: %d firing and %d quiet cases", len(alerts), sum(firing), sum(quiet))
}

func mustRel(t *testing.T, base, target string) string {
	t.Helper()
	rel, err := filepath.Rel(base, target)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

func mergeKeys(ms ...map[string]int) map[string]bool {
	keys := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			keys[k] = true
		}
	}
	return keys
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
