package etcdtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The pinned releases. They must match mk/etcd.mk (a test checks), because
// that is what puts the binaries where BinaryPath looks for them.
const (
	Version34 = "3.4.23" // Debian's etcd-server; best effort, see LookBinary
	Version35 = "3.5.35"
	Version36 = "3.6.16"
	Version37 = "3.7.3"

	// DefaultVersion matches the go.etcd.io/etcd/client/v3 the root module
	// uses, so a test that does not care about versions exercises the pair
	// that production is most likely to run.
	DefaultVersion = Version37
)

// BuiltVersions are the releases that "make etcd-bins" always produces, and
// so the ones a version-matrix test can rely on in CI.
var BuiltVersions = []string{Version35, Version36, Version37}

// BinDirEnv, when set, names the directory holding etcd-v<version> binaries;
// it lets a developer point tests at binaries built elsewhere.
const BinDirEnv = "ETCDTEST_BIN_DIR"

// ErrBinaryMissing is wrapped by LookBinary when the binary is not there.
var ErrBinaryMissing = errors.New("etcd binary missing")

// BinaryPath returns the path of the etcd binary for version (for example
// "3.6.16"). A missing binary skips the test on a developer's machine, where
// not having run make is normal, but fails it when CI=true, where it means
// the CI script forgot to build the binaries and the suite would otherwise
// pass while testing nothing.
func BinaryPath(t testing.TB, version string) string {
	t.Helper()
	p, err := LookBinary(version)
	if err == nil {
		return p
	}
	if !errors.Is(err, ErrBinaryMissing) {
		t.Fatalf("etcdtest: %v", err)
	}
	msg := fmt.Sprintf("etcdtest: %v; run %q from the repository root", err, makeCommand(version))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// LookBinary is BinaryPath without the skip/fail policy, for tests that
// treat a version as optional (Version34 is best effort even in CI).
func LookBinary(version string) (string, error) {
	version = strings.TrimPrefix(version, "v")
	if version == "" {
		return "", errors.New("etcdtest: empty etcd version")
	}
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin")
	}
	p := filepath.Join(dir, "etcd-v"+version)
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: %s", ErrBinaryMissing, p)
	case err != nil:
		return "", fmt.Errorf("etcdtest: stat etcd binary: %w", err)
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("etcdtest: %s is not an executable file", p)
	}
	return p, nil
}

func makeCommand(version string) string {
	if strings.TrimPrefix(version, "v") == Version34 {
		return "make -f mk/etcd.mk etcd-bin-3.4"
	}
	return "make -f mk/etcd.mk etcd-bins"
}

// ModuleRoot walks up from the working directory (the package directory
// under go test) to the nearest go.mod. Nested modules under tools/ are
// never above a test package of the root module, so the first hit is right.
func ModuleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("etcdtest: getwd: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("etcdtest: no go.mod found above %s", wd)
		}
		dir = parent
	}
}
