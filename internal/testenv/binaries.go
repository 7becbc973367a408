package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BinDirEnv overrides the directory of the built binaries.
const BinDirEnv = "ETCDHOOK_BIN_DIR"

// retiredBinDirEnvs are the names the binary directory had before BinDirEnv.
// Nothing in the Makefile, mk/ or .ci sets them; one left in a shell is
// refused rather than silently ignored, which would test other binaries
// than the developer meant.
var retiredBinDirEnvs = []string{"ETCDTEST_BIN_DIR", "ETCDHOOK_E2E_BIN_DIR"}

// The binaries the Makefile builds into bin/, by file name. The etcd
// release binaries are named by Etcd, Etcdctl and Etcdutl.
const (
	Hook          = "etcd-hook"      // make build
	KubeAPIServer = "kube-apiserver" // make kube-bins
	Kubectl       = "kubectl"        // make kube-bins
	KubeScheduler = "kube-scheduler" // make kube-bins
	Helm          = "helm"           // make bin/helm
	Versitygw     = "versitygw"      // make bin/versitygw
	ControllerGen = "controller-gen" // make bin/controller-gen
	Promtool      = "promtool"       // make bin/promtool
	PromQLMetrics = "promql-metrics" // make bin/promql-metrics
)

// Etcd is the file name of the etcd server of a release ("3.6.16" or
// "v3.6.16"), as mk/etcd.mk names it.
func Etcd(version string) string { return etcdRelease("etcd", version) }

// Etcdctl is the file name of the etcdctl of a release.
func Etcdctl(version string) string { return etcdRelease("etcdctl", version) }

// Etcdutl is the file name of the etcdutl of a release (3.5 and later).
func Etcdutl(version string) string { return etcdRelease("etcdutl", version) }

func etcdRelease(tool, version string) string {
	return tool + "-v" + strings.TrimPrefix(version, "v")
}

// ErrBinaryMissing is wrapped by LookBinary and Executable when a binary is
// not there, or is not an executable file.
var ErrBinaryMissing = errors.New("binary missing")

// FindBinDir returns the directory of the built binaries: $ETCDHOOK_BIN_DIR,
// else <root>/bin.
func FindBinDir() (string, error) {
	for _, old := range retiredBinDirEnvs {
		if v := os.Getenv(old); v != "" && os.Getenv(BinDirEnv) == "" {
			return "", fmt.Errorf("testenv: %s=%s is no longer read: set %s instead", old, v, BinDirEnv)
		}
	}
	if d := os.Getenv(BinDirEnv); d != "" {
		return d, nil
	}
	root, err := FindModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// BinDir is FindBinDir for a test.
func BinDir(t testing.TB) string {
	t.Helper()
	d, err := FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// BinaryPath is where the binary name is, or would be once built, for the
// tests that build it on demand.
func BinaryPath(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(BinDir(t), name)
}

// LookBinary returns the path of a built binary by file name (Hook,
// Etcd("3.6.16"), ...). An error wraps ErrBinaryMissing when it is not
// there or not executable; another error means the directory itself could
// not be found.
func LookBinary(name string) (string, error) {
	dir, err := FindBinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	if err := Executable(p); err != nil {
		return "", err
	}
	return p, nil
}

// Binary is LookBinary for a test: a missing binary is SkipOrFail, with the
// make command that builds it.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := LookBinary(name)
	switch {
	case errors.Is(err, ErrBinaryMissing):
		SkipOrFail(t, "%v; run %q from the repository root", err, BuildHint(name))
	case err != nil:
		t.Fatal(err)
	}
	return p
}

// Executable checks that path is an executable file; an error wraps
// ErrBinaryMissing. It is for binaries given by path rather than by name.
func Executable(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("testenv: %w: %s", ErrBinaryMissing, path)
	case err != nil:
		return fmt.Errorf("testenv: binary %s: %w", path, err)
	case st.IsDir() || st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("testenv: %w: %s is not an executable file", ErrBinaryMissing, path)
	}
	return nil
}

// BuildHint is the make command that builds the binary name into bin/.
func BuildHint(name string) string {
	switch name {
	case Hook:
		return "make build"
	case KubeAPIServer, Kubectl, KubeScheduler:
		return "make kube-bins"
	}
	for _, tool := range []string{"etcd", "etcdctl", "etcdutl"} {
		version, ok := strings.CutPrefix(name, tool+"-v")
		if !ok {
			continue
		}
		// 3.4 is Debian's build, fetched best effort by its own target.
		if strings.HasPrefix(version, "3.4.") {
			return "make etcd-bin-3.4"
		}
		return "make etcd-bins"
	}
	return "make bin/" + name
}
