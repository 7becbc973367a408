package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// ModulePath is the module whose root ModuleRoot finds. The nested modules
// under tools/ have go.mod files of their own, so the first go.mod above a
// directory is not enough: its module line must say this.
const ModulePath = "github.com/etcdhook/etcd-hook"

// RootEnv overrides the module root, for a test binary run outside the
// checkout.
const RootEnv = "ETCDHOOK_ROOT"

// The root is cached once found: it does not move while the test binary
// runs, and a test that changes its working directory (t.Chdir) must not
// lose it.
var (
	rootMu    sync.Mutex
	rootFound string
)

// FindModuleRoot returns the module root: $ETCDHOOK_ROOT when set, else the
// nearest directory above the working directory (go test runs in the
// package's directory) whose go.mod declares ModulePath.
func FindModuleRoot() (string, error) {
	rootMu.Lock()
	defer rootMu.Unlock()
	if rootFound != "" {
		return rootFound, nil
	}
	root, err := findModuleRoot()
	if err != nil {
		return "", err
	}
	rootFound = root
	return root, nil
}

func findModuleRoot() (string, error) {
	if r := os.Getenv(RootEnv); r != "" {
		abs, err := filepath.Abs(r)
		if err != nil {
			return "", fmt.Errorf("testenv: %s=%s: %w", RootEnv, r, err)
		}
		if got := moduleOf(filepath.Join(abs, "go.mod")); got != ModulePath {
			return "", fmt.Errorf("testenv: %s=%s has no go.mod of %s (found %q): %w", RootEnv, r, ModulePath, got, fs.ErrNotExist)
		}
		return abs, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testenv: module root: %w", err)
	}
	return moduleRootAbove(wd)
}

// moduleRootAbove walks up from dir to the go.mod of ModulePath.
func moduleRootAbove(dir string) (string, error) {
	for d := dir; ; {
		if moduleOf(filepath.Join(d, "go.mod")) == ModulePath {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("testenv: no go.mod of %s above %s (set %s): %w", ModulePath, dir, RootEnv, fs.ErrNotExist)
		}
		d = parent
	}
}

// moduleOf returns the module path a go.mod declares, "" when there is none.
func moduleOf(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}

// ModuleRoot is FindModuleRoot for a test: not finding the root is a broken
// checkout, never a reason to skip.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root, err := FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Path returns a file of the repository by its slash-separated path from
// the module root ("test/fixtures/new-cluster.json"), whatever package
// directory the test runs in.
func Path(t testing.TB, rel string) string {
	t.Helper()
	return filepath.Join(ModuleRoot(t), filepath.FromSlash(rel))
}

// FromModuleRoot resolves a path given on the command line or in the
// environment as make passes it: relative to the module root, because go
// test runs in the package directory while people run make from the root.
// An absolute path, and "" (no file asked for), stay as they are.
func FromModuleRoot(p string) (string, error) {
	if p == "" || filepath.IsAbs(p) {
		return p, nil
	}
	root, err := FindModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, p), nil
}

// PinnedVersion returns the version at which the go.mod of a tool module
// (toolDir, as "tools/helm") requires module: the release the Makefile
// builds into bin/, against which a test checks a binary left over from
// before a bump.
func PinnedVersion(t testing.TB, toolDir, module string) string {
	t.Helper()
	v, err := pinnedVersion(filepath.Join(ModuleRoot(t), filepath.FromSlash(toolDir), "go.mod"), module)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func pinnedVersion(gomod, module string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("testenv: %s does not require %s: %w", gomod, module, errNotRequired)
}

var errNotRequired = errors.New("module not required")
