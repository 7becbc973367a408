package testenv

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestModuleRootAbove(t *testing.T) {
	tree := t.TempDir()
	root := filepath.Join(tree, "main")
	writeFile(t, filepath.Join(root, "go.mod"), "module "+ModulePath+"\n\ngo 1.26\n")
	writeFile(t, filepath.Join(root, "tools", "helm", "go.mod"), "module "+ModulePath+"/tools/helm\n")
	writeFile(t, filepath.Join(root, "test", "e2e", "harness", "doc.go"), "package harness\n")
	writeFile(t, filepath.Join(tree, "other", "go.mod"), "module example.com/other\n")

	tests := []struct {
		reason string
		start  string
		want   string
	}{
		{"a package directory: the root is two levels up", filepath.Join(root, "test", "e2e", "harness"), root},
		{"the root itself", root, root},
		{"a nested tool module is passed over: its go.mod declares another module", filepath.Join(root, "tools", "helm"), root},
	}
	for _, tt := range tests {
		got, err := moduleRootAbove(tt.start)
		if err != nil {
			t.Errorf("%s: moduleRootAbove(%s): %v", tt.reason, tt.start, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: moduleRootAbove(%s) (-want +got):\n%s", tt.reason, tt.start, diff)
		}
	}
	if _, err := moduleRootAbove(filepath.Join(tree, "other")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("outside the module: got %v, want an error wrapping fs.ErrNotExist", err)
	}
}

// TestFindModuleRoot: from this package's directory, the root is where
// this package's own files are two levels down.
func TestFindModuleRoot(t *testing.T) {
	root, err := FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testenv", "doc.go")); err != nil {
		t.Errorf("FindModuleRoot() = %s, which does not hold internal/testenv: %v", root, err)
	}
	if got, want := Path(t, "internal/testenv/doc.go"), filepath.Join(root, "internal", "testenv", "doc.go"); got != want {
		t.Errorf("Path = %s, want %s", got, want)
	}
}

func TestRootEnvMustBeTheModule(t *testing.T) {
	wrong := t.TempDir()
	writeFile(t, filepath.Join(wrong, "go.mod"), "module example.com/other\n")
	t.Setenv(RootEnv, wrong)
	if _, err := findModuleRoot(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s=%s (another module): got %v, want an error wrapping fs.ErrNotExist", RootEnv, wrong, err)
	}
	right := t.TempDir()
	writeFile(t, filepath.Join(right, "go.mod"), "module "+ModulePath+"\n")
	t.Setenv(RootEnv, right)
	if got, err := findModuleRoot(); err != nil || got != right {
		t.Errorf("%s=%s: got %q, %v; want the override", RootEnv, right, got, err)
	}
}

func TestFromModuleRoot(t *testing.T) {
	root, err := FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		reason, in, want string
	}{
		{"empty means no file asked for", "", ""},
		{"an absolute path stays", "/tmp/report.md", "/tmp/report.md"},
		{"a relative path is make's, from the root", "bin/report.md", filepath.Join(root, "bin", "report.md")},
	}
	for _, tt := range tests {
		got, err := FromModuleRoot(tt.in)
		if err != nil {
			t.Errorf("%s: FromModuleRoot(%q): %v", tt.reason, tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: FromModuleRoot(%q) (-want +got):\n%s", tt.reason, tt.in, diff)
		}
	}
}

func TestPinnedVersion(t *testing.T) {
	gomod := filepath.Join(t.TempDir(), "go.mod")
	writeFile(t, gomod, "module example.com/tools\n\nrequire helm.sh/helm/v3 v3.19.0\n\nrequire (\n\tk8s.io/kubernetes v1.34.1\n\tk8s.io/api v0.34.1 // indirect\n)\n")
	tests := []struct {
		reason, module, want string
	}{
		{"a one-line require", "helm.sh/helm/v3", "v3.19.0"},
		{"a require block", "k8s.io/kubernetes", "v1.34.1"},
	}
	for _, tt := range tests {
		got, err := pinnedVersion(gomod, tt.module)
		if err != nil {
			t.Errorf("%s: %v", tt.reason, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: pinnedVersion(%s) (-want +got):\n%s", tt.reason, tt.module, diff)
		}
	}
	if _, err := pinnedVersion(gomod, "sigs.k8s.io/controller-tools"); !errors.Is(err, errNotRequired) {
		t.Errorf("a module not required: got %v, want errNotRequired", err)
	}
}

func TestFindSharedDir(t *testing.T) {
	shared := t.TempDir()
	t.Setenv(SharedDirEnv, shared)
	if got, err := FindSharedDir(); err != nil || got != shared {
		t.Errorf("%s=%s: got %q, %v; want the override", SharedDirEnv, shared, got, err)
	}
	t.Setenv(SharedDirEnv, filepath.Join(shared, "missing"))
	if _, err := FindSharedDir(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s naming a missing directory: got %v, want an error wrapping fs.ErrNotExist", SharedDirEnv, err)
	}
}
