package monitoring

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/rules.yaml from the PrometheusRule and the dashboard's ConfigMap from dashboard.json")

const (
	monitoringDir = "manifests/monitoring"
	serverDir     = "cmd/etcd-hook"

	// The jobs the PodMonitor and the ServiceMonitor give their targets.
	membersJob = "etcd-hook-members"
	hookJob    = "etcd-hook"
)

// selector is one vector selector of an expression, as Prometheus parsed it.
type selector struct {
	Metric   string            `json:"metric"`
	Matchers map[string]string `json:"matchers"`
}

// parsedExpr is what bin/promql-metrics says of one expression.
type parsedExpr struct {
	Expr      string     `json:"expr"`
	Metrics   []string   `json:"metrics"`
	Selectors []selector `json:"selectors"`
	Error     string     `json:"error"`
}

// parsePromQL parses expressions with Prometheus's own parser
// (bin/promql-metrics), building it with make when it is missing.
func parsePromQL(t *testing.T, exprs []string) []parsedExpr {
	t.Helper()
	root := testenv.ModuleRoot(t)
	bin := testenv.BinaryPath(t, testenv.PromQLMetrics)
	if _, err := os.Stat(bin); err != nil {
		if _, err := exec.LookPath("make"); err != nil {
			testenv.SkipOrFail(t, "%s is missing and make is not installed to build it: %v", bin, err)
		}
		cmd := exec.Command("make", "bin/promql-metrics")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make bin/promql-metrics: %v\n%s", err, out)
		}
	}
	in, err := json.Marshal(exprs)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.String())
	}
	var parsed []parsedExpr
	if err := json.Unmarshal(out, &parsed); err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	if len(parsed) != len(exprs) {
		t.Fatalf("%s answered %d results for %d expressions", bin, len(parsed), len(exprs))
	}
	return parsed
}

// exported is the set of metric names that the hook or an etcd member
// serves, each with where it comes from.
type exported map[string]string

func (e exported) add(names []string, source string) {
	for _, n := range names {
		if _, ok := e[n]; !ok {
			e[n] = source
		}
	}
}

var (
	etcdNamesOnce sync.Once
	etcdNames     map[string][]string // by etcd release
	etcdNamesErr  error
)

// exportedMetrics: the series names the hook registers, those every etcd
// release the hook runs serves, and up, which Prometheus adds to every
// target.
func exportedMetrics(t *testing.T) exported {
	t.Helper()
	e := exported{"up": "Prometheus (every target)"}
	e.add(hookMetricNames(t), "the hook ("+serverDir+"/)")
	// Only the names every release serves: a cluster may run any of them.
	byRelease := etcdMetricNames(t)
	releases := slices.Sorted(maps.Keys(byRelease))
	common := slices.Clone(byRelease[releases[0]])
	for _, r := range releases[1:] {
		common = slices.DeleteFunc(common, func(n string) bool { return !slices.Contains(byRelease[r], n) })
	}
	e.add(common, "etcd "+strings.Join(releases, ", "))
	return e
}

// etcdMetricNames starts a 3-member cluster of every etcd release at hand
// (3.5 and 3.6 always, 3.4 when its binary is there), kills one member of
// each so that the others count failed sends to it, and reads the series
// names from a survivor's /metrics once the late series are there. The
// clusters run side by side: those take seconds to appear.
func etcdMetricNames(t *testing.T) map[string][]string {
	t.Helper()
	etcdNamesOnce.Do(func() {
		versions := slices.Clone(etcdtest.BuiltVersions)
		if _, err := testenv.LookBinary(testenv.Etcd(etcdtest.Version34)); err == nil {
			versions = append(versions, etcdtest.Version34)
		}
		for _, v := range versions {
			if _, err := testenv.LookBinary(testenv.Etcd(v)); err != nil {
				etcdNamesErr = err
				return
			}
		}
		etcdNames, etcdNamesErr = scrapeEtcd(t, versions)
	})
	if errors.Is(etcdNamesErr, testenv.ErrBinaryMissing) {
		testenv.SkipOrFail(t, "%v; run %q", etcdNamesErr, testenv.BuildHint(testenv.Etcd(etcdtest.DefaultVersion)))
	}
	if etcdNamesErr != nil {
		t.Fatal(etcdNamesErr)
	}
	return etcdNames
}

// lateSeries appear some time after a member starts: the failed sends to a
// peer once one is unreachable, and the round trip to each peer, first
// measured 5 s after the peer is known (rafthttp's prober).
var lateSeries = []string{"etcd_network_peer_sent_failures_total", "etcd_network_peer_round_trip_time_seconds_bucket"}

func scrapeEtcd(t *testing.T, versions []string) (map[string][]string, error) {
	start := time.Now()
	survivors := map[string]string{}
	for _, v := range versions {
		c := etcdtest.StartCluster(t, etcdtest.Options{Size: 3, Version: v})
		c.Kill(2)
		survivors[v] = c.Members[0].ClientURL + "/metrics"
	}
	names := map[string][]string{}
	deadline := time.Now().Add(30 * time.Second)
	for len(names) < len(versions) {
		for v, url := range survivors {
			if _, done := names[v]; done {
				continue
			}
			got, err := seriesNames(url)
			if err != nil {
				return nil, fmt.Errorf("etcd %s: %w", v, err)
			}
			if !slices.ContainsFunc(lateSeries, func(n string) bool { return !slices.Contains(got, n) }) {
				names[v] = got
				t.Logf("etcd %s serves %d series names (%v after the first start)", v, len(got), time.Since(start).Round(time.Millisecond))
			}
		}
		if len(names) < len(versions) && time.Now().After(deadline) {
			return nil, fmt.Errorf("not all of %s 30 s after a member was killed", strings.Join(lateSeries, ", "))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return names, nil
}

var sampleName = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)

// seriesNames reads the names of the samples a /metrics page serves (a
// histogram's _bucket, _sum and _count each).
func seriesNames(url string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	var names []string
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if m := sampleName.FindStringSubmatch(sc.Text()); m != nil {
			names = append(names, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// hookMetricNames reads the names the hook registers from the server
// package's source (it is package main, so its registry cannot be
// imported): the Name of every prometheus.*Opts literal, with the series a
// histogram or a summary adds, and the name given to every *Desc
// constructor (prometheus.NewDesc, or a helper such as clusterDesc).
func hookMetricNames(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(testenv.ModuleRoot(t), serverDir)
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				for _, elt := range n.Elts {
					kv, ok := elt.(*ast.KeyValueExpr)
					if !ok || !isIdent(kv.Key, "Name") {
						continue
					}
					name, ok := stringLit(kv.Value)
					if !ok {
						t.Errorf("%s: a metric Name that is not a string literal: this test cannot read it", fset.Position(kv.Pos()))
						continue
					}
					names = append(names, name)
					switch sel.Sel.Name {
					case "HistogramOpts":
						names = append(names, name+"_bucket", name+"_sum", name+"_count")
					case "SummaryOpts":
						names = append(names, name+"_sum", name+"_count")
					}
				}
			case *ast.CallExpr:
				if !strings.HasSuffix(calleeName(n.Fun), "Desc") || len(n.Args) == 0 {
					return true
				}
				if name, ok := stringLit(n.Args[0]); ok {
					names = append(names, name)
				}
			}
			return true
		})
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func calleeName(e ast.Expr) string {
	switch f := e.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
