package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// SharedDirEnv overrides where the shared recordings are.
const SharedDirEnv = "ETCDHOOK_SHARED_DIR"

// sharedHint says how to get the shared recordings.
const sharedHint = "put the shared recordings beside the repository as ../shared, or set " + SharedDirEnv

// FindSharedDir returns the directory of the recordings kept beside the
// repository (Metacontroller's captured requests, its CRDs):
// $ETCDHOOK_SHARED_DIR, else shared/ next to the module root, else one level
// further up (a checkout in a subdirectory of the clone). An error wraps
// fs.ErrNotExist when there is none.
func FindSharedDir() (string, error) {
	if d := os.Getenv(SharedDirEnv); d != "" {
		if err := isDir(d); err != nil {
			return "", fmt.Errorf("testenv: %s: %w", SharedDirEnv, err)
		}
		return d, nil
	}
	root, err := FindModuleRoot()
	if err != nil {
		return "", err
	}
	var tried []string
	for _, d := range []string{filepath.Dir(root), filepath.Dir(filepath.Dir(root))} {
		candidate := filepath.Join(d, "shared")
		if isDir(candidate) == nil {
			return candidate, nil
		}
		tried = append(tried, candidate)
	}
	return "", fmt.Errorf("testenv: no shared recordings at %v: %w", tried, fs.ErrNotExist)
}

// SharedDir is FindSharedDir for a test that needs the recordings: without
// them it is skipped, or fails when CI=true, where the clone always has them
// beside it.
func SharedDir(t testing.TB) string {
	t.Helper()
	d, err := FindSharedDir()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		SkipOrFail(t, "%v; %s", err, sharedHint)
	case err != nil:
		t.Fatal(err)
	}
	return d
}

// CapturedRequests returns the paths of the requests Metacontroller really
// sent (metacontroller/captured/*.request.json in SharedDir); a test with
// none of them fails, because it would then check nothing.
func CapturedRequests(t testing.TB) []string {
	t.Helper()
	dir := filepath.Join(SharedDir(t), "metacontroller", "captured")
	files, err := filepath.Glob(filepath.Join(dir, "*.request.json"))
	if err != nil {
		t.Fatal(err)
	}
	Require(t, len(files) > 0, "no captured requests in %s", dir)
	return files
}

func isDir(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory: %w", p, fs.ErrNotExist)
	}
	return nil
}
