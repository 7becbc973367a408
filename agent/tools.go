package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ToolsExecutable is the name this binary is copied under into the tools
// volume: the restore step runs in the etcd image of the cluster's version,
// which has no shell and none of our code, as "<tools-dir>/etcd-hook
// restore apply".
const ToolsExecutable = "etcd-hook"

const toolsPartialPrefix = ".partial-" + ToolsExecutable + "-"

// installExecutable copies src into dir as ToolsExecutable, mode 0755,
// through a temporary file and a rename: a restarted Pod re-runs this over
// a copy the next init container may be about to exec, which must never
// see a half-written file.
func installExecutable(src, dir string) error {
	if err := copyExecutable(src, dir); err != nil {
		return fmt.Errorf("copy this executable into the tools volume %s: %w", dir, err)
	}
	return nil
}

func copyExecutable(src, dir string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Left by a run that was killed mid-copy.
	old, _ := filepath.Glob(filepath.Join(dir, toolsPartialPrefix+"*"))
	for _, p := range old {
		_ = os.Remove(p)
	}
	out, err := os.CreateTemp(dir, toolsPartialPrefix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(out.Name())
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return err
	}
	// CreateTemp makes 0600 files; the etcd image may run as another user.
	if err := out.Chmod(0o755); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(out.Name(), filepath.Join(dir, ToolsExecutable)); err != nil {
		return err
	}
	return syncDir(dir)
}
