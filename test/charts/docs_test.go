package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v2"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

var (
	// A "# -- " comment starts the documentation of the key below it.
	docComment = regexp.MustCompile(`^\s*# -- \S`)
	valuesKey  = regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):`)
	// A row of the README's values table: | `path` | `default` | meaning |
	readmeRow = regexp.MustCompile("^\\| `([A-Za-z0-9.]+)` \\| `([^`]*)` \\| .+ \\|$")
)

// TestValuesDocumented: every value of values.yaml is documented there (a
// "# -- " comment on it or on the map it belongs to), the chart README's
// table has a row for each documented value with its default as it is in
// values.yaml (JSON), and no row for anything else; and the schema knows
// each documented value.
func TestValuesDocumented(t *testing.T) {
	root := testenv.ModuleRoot(t)
	valuesFile := filepath.Join(root, chartDir, "values.yaml")
	raw, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var values any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	if values, err = jsonish(values); err != nil {
		t.Fatal(err)
	}

	documented := documentedPaths(string(raw))
	if len(documented) == 0 {
		t.Fatalf("%s: no value documented with a \"# -- \" comment", valuesFile)
	}
	for _, leaf := range leafPaths("", values) {
		if !slices.ContainsFunc(documented, func(d string) bool { return leaf == d || strings.HasPrefix(leaf, d+".") }) {
			t.Errorf("%s: %s has no \"# -- \" comment, on itself or on a map above it", valuesFile, leaf)
		}
	}

	// The defaults of documented values, as the README writes them.
	want := map[string]string{}
	for _, path := range documented {
		b, err := json.Marshal(lookup(values, strings.Split(path, ".")...))
		if err != nil {
			t.Fatal(err)
		}
		want[path] = string(b)
	}
	readme, err := os.ReadFile(filepath.Join(root, chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for line := range strings.Lines(string(readme)) {
		if m := readmeRow.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			got[m[1]] = m[2]
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s/README.md's values table is not values.yaml's documented values and defaults (-values.yaml +README):\n%s", chartDir, diff)
	}

	var schema map[string]any
	b, err := os.ReadFile(filepath.Join(root, chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	for _, path := range documented {
		node := any(schema)
		for _, k := range strings.Split(path, ".") {
			node = lookup(node, "properties", k)
		}
		if node == nil {
			t.Errorf("values.schema.json has no properties for %s", path)
		} else if lookup(node, "description") == nil {
			t.Errorf("values.schema.json: %s has no description", path)
		}
	}
}

// documentedPaths lists the dotted paths of the keys of values.yaml that a
// "# -- " comment precedes (two spaces of indentation per level).
func documentedPaths(values string) []string {
	var paths, stack []string
	pending := false
	for line := range strings.Lines(values) {
		line = strings.TrimRight(line, "\n")
		switch {
		case docComment.MatchString(line):
			pending = true
		case strings.HasPrefix(strings.TrimSpace(line), "#"), strings.TrimSpace(line) == "":
			// a comment's continuation, or a blank line, keeps it pending
		default:
			m := valuesKey.FindStringSubmatch(line)
			if m == nil {
				pending = false
				continue
			}
			depth := len(m[1]) / 2
			stack = append(stack[:min(depth, len(stack))], m[2])
			if pending {
				paths = append(paths, strings.Join(stack, "."))
			}
			pending = false
		}
	}
	return paths
}

// leafPaths lists the dotted paths of the values that are not maps, and of
// empty maps, sorted.
func leafPaths(prefix string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return []string{prefix}
	}
	var out []string
	for k, e := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		out = append(out, leafPaths(p, e)...)
	}
	sort.Strings(out)
	return out
}
