package harness

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const modulePath = "github.com/etcdhook/etcd-hook"

// ModuleRoot finds the repository root by walking up from the working
// directory (go test runs in the package directory) to the go.mod of this
// module; ETCDHOOK_ROOT overrides it.
func ModuleRoot() (string, error) {
	if r := os.Getenv("ETCDHOOK_ROOT"); r != "" {
		return r, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for range 64 {
		if moduleOf(filepath.Join(dir, "go.mod")) == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("module root: no go.mod of %s above the working directory: %w", modulePath, os.ErrNotExist)
}

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

// BinDir is where the built binaries live: <root>/bin, or ETCDHOOK_E2E_BIN_DIR.
func BinDir() (string, error) {
	if d := os.Getenv("ETCDHOOK_E2E_BIN_DIR"); d != "" {
		return d, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// EtcdBinary returns the path of bin/etcd-v<version> ("3.6.16" or "v3.6.16").
func EtcdBinary(version string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "etcd-v"+strings.TrimPrefix(version, "v")), nil
}

// RequireBinary skips the test when a binary is missing (fails with CI=true,
// where `make` must have built it).
func RequireBinary(t interface {
	Helper()
	Skipf(string, ...any)
	Fatalf(string, ...any)
}, path, buildHint string) {
	t.Helper()
	if err := executable(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (build it with %s)", err, buildHint)
		}
		t.Skipf("%v (build it with %s)", err, buildHint)
	}
}

func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("binary %s: %w", path, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("binary %s: %w", path, errors.New("not an executable file"))
	}
	return nil
}
