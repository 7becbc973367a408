package layout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/etcdhook/etcd-hook"

// pkg is what go list says of one package of the module.
type pkg struct {
	ImportPath, Name, Dir string
	GoFiles               []string
	Imports, Deps         []string
}

func listModule(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Name,Dir,GoFiles,Imports,Deps", module+"/...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages: not the module", len(pkgs))
	}
	return pkgs
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func byPath(pkgs []pkg) map[string]pkg {
	m := map[string]pkg{}
	for _, p := range pkgs {
		m[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p
	}
	return m
}

// forbidden reports the first dependency of deps that a rule matches. A
// rule "p" matches the package p and every package under it, "p/" only
// those under it, and "=p" only p itself.
func forbidden(deps []string, rules []string) (string, bool) {
	for _, d := range deps {
		for _, r := range rules {
			exact, ok := strings.CutPrefix(r, "=")
			switch {
			case ok && d == exact,
				!ok && strings.HasSuffix(r, "/") && strings.HasPrefix(d, r),
				!ok && (d == r || strings.HasPrefix(d, r+"/")):
				return d, true
			}
		}
	}
	return "", false
}

// The clients a pure planner must never link: each drags in hundreds of
// packages, and with them I/O the planner must not be able to do.
var clients = []string{
	"google.golang.org/grpc",
	"go.etcd.io/etcd/client/v3",
	"go.etcd.io/etcd/api/v3",
	"github.com/minio/minio-go/v7",
	"go.etcd.io/bbolt",
	"k8s.io/client-go",
	"sigs.k8s.io/controller-runtime",
}

func TestArrowsPointDown(t *testing.T) {
	pkgs := byPath(listModule(t))
	tests := []struct {
		pkg    string
		reason string
		// never lists prefixes of import paths the package may not depend
		// on, even through others.
		never []string
	}{
		{"plan", "the planners' shared leaf is pure", append(clients, module+"/plan/", module+"/etcdclient", module+"/reconcile", "="+module+"/agent")},
		{"plan/etcdcluster", "a planner is pure: it decides, the reconciler acts", append(clients, module+"/etcdclient", module+"/reconcile", "="+module+"/agent", module+"/hooks")},
		{"plan/etcdbackup", "a planner reads the agent's report, never the agent", append(clients, module+"/etcdclient", module+"/reconcile", "="+module+"/agent", module+"/plan/etcdcluster")},
		{"plan/etcdrestore", "a planner is pure", append(clients, module+"/etcdclient", module+"/reconcile", "="+module+"/agent", module+"/plan/etcdcluster")},
		{"hooks", "the wire contract decodes and encodes; the reconciler it is given does the I/O", append(clients, module+"/etcdclient", module+"/reconcile", "="+module+"/agent")},
		{"membership", "etcd's vocabulary is a leaf", append(clients, module+"/")},
		{"agent/report", "the agents' contract is a leaf the planners can read", append(clients, module+"/", "k8s.io/")},
		{"etcdclient", "the door to etcd speaks membership's vocabulary, never a planner's", []string{module + "/plan", module + "/reconcile", module + "/hooks", "=" + module + "/agent"}},
		{"api/v1beta2", "the types are below everything", []string{module + "/"}},
		{"agent", "the agents never decide what a planner decides", []string{module + "/plan", module + "/reconcile", module + "/hooks"}},
	}
	for _, tt := range tests {
		p, ok := pkgs[tt.pkg]
		if !ok {
			t.Errorf("package %s not found: the layout changed, change this test with it", tt.pkg)
			continue
		}
		if dep, bad := forbidden(p.Deps, tt.never); bad {
			t.Errorf("%s depends on %s (%s); see go list -deps ./%s", tt.pkg, dep, tt.reason, tt.pkg)
		}
	}
}

// TestForbiddenCatchesADependency proves the check above can fail.
func TestForbiddenCatchesADependency(t *testing.T) {
	deps := []string{"fmt", "google.golang.org/grpc/internal/transport", module + "/plan/etcdcluster"}
	for _, tt := range []struct {
		prefixes []string
		want     string
	}{
		{clients, "google.golang.org/grpc/internal/transport"},
		{[]string{module + "/plan"}, module + "/plan/etcdcluster"},
		{[]string{module + "/plan/etcd"}, ""},
		{[]string{"=" + module + "/plan"}, ""},
		{[]string{module + "/plan/"}, module + "/plan/etcdcluster"},
	} {
		got, _ := forbidden(deps, tt.prefixes)
		if got != tt.want {
			t.Errorf("forbidden(%v) = %q, want %q", tt.prefixes, got, tt.want)
		}
	}
}

func TestNoPackageShadowsTheStandardLibrary(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.Name}}", "std")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list std: %v", err)
	}
	std := map[string]bool{}
	for _, name := range strings.Fields(string(out)) {
		std[name] = true
	}
	delete(std, "main")
	for _, p := range listModule(t) {
		base := filepath.Base(p.ImportPath)
		if std[p.Name] || std[base] {
			t.Errorf("package %s (%s) has the name of a standard-library package: importers would have to rename one of them", p.ImportPath, p.Name)
		}
	}
}

// productFile reports whether a file is the product's code rather than a
// test, a test helper or a pinned tool.
func productFile(rel string) bool {
	if strings.HasSuffix(rel, "_test.go") || !strings.HasSuffix(rel, ".go") {
		return false
	}
	for _, dir := range []string{"test/", "internal/", "tools/"} {
		if strings.HasPrefix(rel, dir) {
			return false
		}
	}
	return true
}

const maxProductLines = 400

func TestNoProductFileIsLong(t *testing.T) {
	root := moduleRoot(t)
	for _, p := range listModule(t) {
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			rel, _ := filepath.Rel(root, path)
			if !productFile(rel) {
				continue
			}
			if n := countLines(t, path); n > maxProductLines {
				t.Errorf("%s has %d lines, over %d: split it along what its parts decide", rel, n, maxProductLines)
			}
		}
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		n++
	}
	return n
}

var issueName = regexp.MustCompile(`(?i)issue[-_]?\d+`)

func TestNoFileIsNamedAfterAnIssue(t *testing.T) {
	root := moduleRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	for _, rel := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if issueName.MatchString(filepath.Base(rel)) {
			t.Errorf("%s is named after an issue: name it after what it holds", rel)
		}
	}
}

func TestEveryPackageSaysWhatItIsFor(t *testing.T) {
	for _, p := range listModule(t) {
		if len(p.GoFiles) == 0 {
			continue // tests only: the test files say it
		}
		if !slices.Contains(p.GoFiles, "doc.go") {
			t.Errorf("%s has no doc.go: say what the package is for and what it may import", p.ImportPath)
			continue
		}
		doc, err := os.ReadFile(filepath.Join(p.Dir, "doc.go"))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("// Package %s ", p.Name)
		if p.Name == "main" {
			want = "// Command "
		}
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("%s/doc.go does not start its comment with %q", p.ImportPath, want)
		}
	}
}
