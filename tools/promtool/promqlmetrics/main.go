// Command promql-metrics parses PromQL expressions with Prometheus's own
// parser and names the metrics each one selects. test/monitoring uses it to
// check that every alert and dashboard query names a metric the hook or
// etcd exports: a hand-written scanner could miss a selector, the parser
// that Prometheus evaluates the rules with cannot.
//
// It reads a JSON array of expressions on stdin and writes a JSON array of
// results, one per expression and in the same order:
//
//	{"expr": "...", "metrics": ["up", ...],
//	 "selectors": [{"metric": "up", "matchers": {"job": "=etcd"}}], "error": "..."}
//
// metrics is sorted and without duplicates; selectors are in the order
// they appear, so that a caller can check how each one is filtered. A selector without a fixed
// metric name ({__name__=~"..."} or no name at all) is an error: nothing
// could check what it selects.
//
// It lives in the promtool tools module because it needs the same
// Prometheus release as bin/promtool (tools/promtool/go.mod), not in the
// root module, whose dependencies would all follow Prometheus's.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type result struct {
	Expr      string     `json:"expr"`
	Metrics   []string   `json:"metrics"`
	Selectors []selector `json:"selectors"`
	Error     string     `json:"error,omitempty"`
}

// selector is one vector selector: its metric name and its other label
// matchers, each as operator and value (`=~"a|b"` is "=~a|b").
type selector struct {
	Metric   string            `json:"metric"`
	Matchers map[string]string `json:"matchers"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "promql-metrics:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var exprs []string
	if err := json.NewDecoder(in).Decode(&exprs); err != nil {
		return fmt.Errorf("read a JSON array of expressions: %w", err)
	}
	p := parser.NewParser(parser.Options{})
	results := make([]result, 0, len(exprs))
	for _, e := range exprs {
		names, sels, err := selectors(p, e)
		r := result{Expr: e, Metrics: names, Selectors: sels}
		if err != nil {
			r.Error = err.Error()
		}
		results = append(results, r)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

func selectors(p parser.Parser, expr string) ([]string, []selector, error) {
	ast, err := p.ParseExpr(expr)
	if err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	names, sels := []string{}, []selector{}
	var unnamed error
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		s := selector{Metric: vs.Name, Matchers: map[string]string{}}
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name != labels.MetricName:
				s.Matchers[m.Name] = m.Type.String() + m.Value
			case m.Type == labels.MatchEqual:
				s.Metric = m.Value
			}
		}
		if s.Metric == "" {
			unnamed = fmt.Errorf("selector %s has no fixed metric name", vs.String())
			return nil
		}
		names = append(names, s.Metric)
		sels = append(sels, s)
		return nil
	})
	slices.Sort(names)
	return slices.Compact(names), sels, unnamed
}
