package layout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/testenv"
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
	cmd.Dir = testenv.ModuleRoot(t)
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
		{"agent/archive", "a continuous backup's layout reads listings and bytes, never a store or etcd", append(clients, module+"/", "k8s.io/", "go.etcd.io/")},
		{"etcdclient", "the door to etcd speaks membership's vocabulary, never a planner's", []string{module + "/plan", module + "/reconcile", module + "/hooks", "=" + module + "/agent"}},
		{"api/v1beta2", "the types are below everything", []string{module + "/"}},
		{"shard", "routing syncs between replicas moves bytes: it never decodes a sync, plans or reaches etcd", append(clients, module+"/hooks", module+"/plan", module+"/reconcile", module+"/etcdclient", module+"/agent", "k8s.io/")},
		{"agent", "the agents never decide what a planner decides", []string{module + "/plan", module + "/reconcile", module + "/hooks"}},
		{"internal/testenv", "the leaf every test helper and test builds on: the standard library only", append(slices.Clone(clients), module+"/", "github.com/", "go.etcd.io/", "go.uber.org/", "go.yaml.in/", "golang.org/", "google.golang.org/", "k8s.io/", "sigs.k8s.io/")},
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
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}}", "std")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list std: %v", err)
	}
	std := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		path, name, _ := strings.Cut(strings.TrimSpace(line), " ")
		// Only what a program can import can collide in an importer: the
		// standard library's internal and vendored packages cannot be.
		if importableStd(path) {
			std[name] = true
		}
	}
	delete(std, "main")
	for _, p := range listModule(t) {
		base := filepath.Base(p.ImportPath)
		if std[p.Name] || std[base] {
			t.Errorf("package %s (%s) has the name of a standard-library package: importers would have to rename one of them", p.ImportPath, p.Name)
		}
	}
}

// importableStd reports whether a standard-library package can be imported
// outside the standard library.
func importableStd(path string) bool {
	if strings.HasPrefix(path, "vendor/") {
		return false
	}
	return !slices.Contains(strings.Split(path, "/"), "internal")
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
	root := testenv.ModuleRoot(t)
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
	root := testenv.ModuleRoot(t)
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

// goFiles lists the module's Go files, test files and files of other
// platforms included, as slash-separated paths from the root. The nested
// modules (tools/...) and what no package holds (testdata, bin) are left
// out: they are not this module's code.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if name := d.Name(); name == "testdata" || name == "bin" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 100 {
		t.Fatalf("found %d Go files under %s: not the module", len(files), root)
	}
	return files
}

// maxHelperLines bounds the files of the test helpers: the harness' kubelet
// and Metacontroller reached 1,150 and 1,250 lines, three concerns each,
// before they were split along their seams.
const maxHelperLines = 600

// helperDirs are the test helpers held to maxHelperLines, tests included.
var helperDirs = []string{"test/e2e/harness/", "internal/"}

func TestNoHarnessFileIsLong(t *testing.T) {
	root := testenv.ModuleRoot(t)
	checked := 0
	for _, rel := range goFiles(t, root) {
		if !slices.ContainsFunc(helperDirs, func(dir string) bool { return strings.HasPrefix(rel, dir) }) {
			continue
		}
		checked++
		if n := countLines(t, filepath.Join(root, rel)); n > maxHelperLines {
			t.Errorf("%s has %d lines, over %d: split it along its seams, one concept per file (as kubelet.go, kubelet_pods.go, kubelet_containers.go and kubelet_status.go are)", rel, n, maxHelperLines)
		}
	}
	if checked == 0 {
		t.Errorf("no Go file under %v: the layout changed, change this test with it", helperDirs)
	}
}

// TestNoTestFileIsLong holds every test file to maxHelperLines too: a
// scenario file of 1,100 lines (faults, before its split) hides which test
// covers what as surely as a long helper does.
func TestNoTestFileIsLong(t *testing.T) {
	root := testenv.ModuleRoot(t)
	checked := 0
	for _, rel := range goFiles(t, root) {
		if !strings.HasSuffix(rel, "_test.go") {
			continue
		}
		checked++
		if n := countLines(t, filepath.Join(root, rel)); n > maxHelperLines {
			t.Errorf("%s has %d lines, over %d: split it along its seams, each test with the helpers only it uses", rel, n, maxHelperLines)
		}
	}
	if checked < 50 {
		t.Errorf("found %d test files: the walk missed the module", checked)
	}
}

// mayReimplement lists where the checks of TestTestenvIsTheOnlyOne do not
// apply, each with the reason.
var mayReimplement = []struct{ dir, reason string }{
	{"internal/testenv/", "it is the one implementation"},
	{"test/layout/", "it names the patterns it looks for"},
}

// reimplementation is one place that does again what internal/testenv does.
type reimplementation struct {
	Line int
	What string // the rule: ci, gomod, relative-root
}

// reimplementationFixes say, by rule, what to call instead.
var reimplementationFixes = map[string]string{
	"ci":            `reads CI itself: call testenv.SkipOrFail, testenv.Require or testenv.InCI (internal/testenv/ci.go)`,
	"gomod":         `finds the module root through go.mod: call testenv.ModuleRoot or testenv.FindModuleRoot (internal/testenv/root.go)`,
	"relative-root": `reaches the repository by a path relative to the package directory: call testenv.Path, testenv.ModuleRoot or testenv.SharedDir`,
}

// parentSteps matches a path made only of "..": the module root as seen
// from a package two or more levels down.
var parentSteps = regexp.MustCompile(`^\.\.(/\.\.)+/?$`)

// reimplementations parses one Go file and reports each place that reads
// CI itself, walks up to a go.mod, or climbs out of its package directory
// into the repository (to one of repoDirs, or to the root).
func reimplementations(src []byte, repoDirs map[string]bool) ([]reimplementation, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []reimplementation
	add := func(n ast.Node, what string) {
		out = append(out, reimplementation{Line: fset.Position(n.Pos()).Line, What: what})
	}
	// A function that names go.mod and looks at the working directory or
	// above it is a root finder; naming go.mod alone (a tool's pinned
	// version) is not.
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		var gomod ast.Node
		walks := false
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind == token.STRING && n.Value == `"go.mod"` && gomod == nil {
					gomod = n
				}
			case *ast.CallExpr:
				walks = walks || isCall(n, "os", "Getwd") || isCall(n, "filepath", "Abs") || isCall(n, "filepath", "Dir")
			}
			return true
		})
		if gomod != nil && walks {
			add(gomod, "gomod")
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if (isCall(n, "os", "Getenv") || isCall(n, "os", "LookupEnv")) && len(n.Args) == 1 && stringLit(n.Args[0]) == "CI" {
				add(n, "ci")
			}
			if isCall(n, "filepath", "Join") && len(n.Args) > 1 && stringLit(n.Args[0]) == ".." {
				for _, a := range n.Args[1:] {
					if s := stringLit(a); s != ".." {
						if repoDirs[s] {
							add(n, "relative-root")
						}
						break
					}
				}
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				break
			}
			s := stringLit(n)
			if s == "GOMOD" {
				add(n, "gomod")
			}
			rest := strings.TrimLeft(strings.ReplaceAll(s, "../", "\x00"), "\x00")
			first, _, _ := strings.Cut(rest, "/")
			if parentSteps.MatchString(s) || (strings.HasPrefix(s, "../") && repoDirs[first]) {
				add(n, "relative-root")
			}
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out, nil
}

func isCall(c *ast.CallExpr, pkg, name string) bool {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// stringLit is the value of a string literal, "" for anything else.
func stringLit(e ast.Expr) string {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return ""
	}
	return s
}

// repositoryDirs are the top-level directories of the repository, and
// shared (beside it), that a path climbing out of a package can aim at.
func repositoryDirs(t *testing.T, root string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]bool{"shared": true}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			dirs[e.Name()] = true
		}
	}
	return dirs
}

// TestTestenvIsTheOnlyOne: the module root, the CI-or-skip rule and the
// way to the repository's files are internal/testenv's; a test that
// reimplements one drifts from the others (it had happened about ten times
// each before testenv).
func TestTestenvIsTheOnlyOne(t *testing.T) {
	root := testenv.ModuleRoot(t)
	repoDirs := repositoryDirs(t, root)
	for _, rel := range goFiles(t, root) {
		if slices.ContainsFunc(mayReimplement, func(e struct{ dir, reason string }) bool { return strings.HasPrefix(rel, e.dir) }) {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		found, err := reimplementations(src, repoDirs)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		for _, r := range found {
			t.Errorf("%s:%d %s", rel, r.Line, reimplementationFixes[r.What])
		}
	}
}

// TestReimplementationsAreFound proves the check above can fail, and that
// it leaves alone what only looks similar.
func TestReimplementationsAreFound(t *testing.T) {
	repoDirs := map[string]bool{"test": true, "shared": true, "mk": true}
	tests := []struct {
		reason string
		body   string
		want   []reimplementation
	}{
		{"reading CI to choose between skip and fail", `if os.Getenv("CI") == "true" { t.Fatal(msg) }`, []reimplementation{{Line: 3, What: "ci"}}},
		{"LookupEnv reads it too", `_, ci := os.LookupEnv("CI")`, []reimplementation{{Line: 3, What: "ci"}}},
		{"another variable is not the rule", `_ = os.Getenv("CIRCLE")`, nil},
		{"walking up to go.mod", "dir, _ := os.Getwd()\nfor {\nif _, err := os.Stat(filepath.Join(dir, \"go.mod\")); err == nil { return }\ndir = filepath.Dir(dir)\n}", []reimplementation{{Line: 5, What: "gomod"}}},
		{"asking the go command", `out, _ := exec.Command("go", "env", "GOMOD").Output()`, []reimplementation{{Line: 3, What: "gomod"}}},
		{"a tool's pinned version names go.mod without looking for the root", `_, _ = os.ReadFile(filepath.Join(root, "tools", "helm", "go.mod"))`, nil},
		{"a fixture by a path relative to the package", `_, _ = os.ReadFile("../../test/fixtures/new-cluster.json")`, []reimplementation{{Line: 3, What: "relative-root"}}},
		{"the shared recordings beside the clone", `_, _ = filepath.Glob("../../shared/metacontroller/captured/*.json")`, []reimplementation{{Line: 3, What: "relative-root"}}},
		{"the root itself", `_, _ = os.ReadFile("../../" + page)`, []reimplementation{{Line: 3, What: "relative-root"}}},
		{"the root as path elements", `_, _ = os.ReadFile(filepath.Join("..", "..", "mk", "etcd.mk"))`, []reimplementation{{Line: 3, What: "relative-root"}}},
		{"a path's own parent is not the repository", `ok := item != ".." && !strings.HasPrefix(p, "../escape")`, nil},
	}
	for _, tt := range tests {
		src := "package x\nfunc f() {\n" + tt.body + "\n}\n"
		got, err := reimplementations([]byte(src), repoDirs)
		if err != nil {
			t.Errorf("%s: %v", tt.reason, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: reimplementations (-want +got):\n%s", tt.reason, diff)
		}
	}
}
