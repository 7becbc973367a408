package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/etcdhook/etcd-hook/agent/report"
)

// ApplyOptions is one "etcd-hook restore apply", run in the etcd image of
// the cluster's version so that the snapshot is restored by that release's
// own tool: the layout of a data dir is etcd's business, and differs
// between releases.
type ApplyOptions struct {
	// Etcdutl is the release's etcdutl (3.5 and later); Etcdctl its
	// etcdctl, for releases before 3.5, which have no etcdutl. Exactly one.
	Etcdutl string
	Etcdctl string
	// Snapshot is the file Fetch verified and placed.
	Snapshot string
	// DataDir is the member's data dir; it must not hold a member yet.
	DataDir string
	// The member's bootstrap flags, as the seed member is started with.
	Name                     string
	InitialCluster           string
	InitialClusterToken      string
	InitialAdvertisePeerURLs string
	// BumpRevision, if not 0, raises the restored store's revision by that
	// much, with MarkCompacted, so that watchers (kube-apiserver's caches)
	// that saw revisions past the snapshot's are told to relist rather
	// than missing changes. etcd requires the two together.
	BumpRevision  uint64
	MarkCompacted bool
	// ReplacedRevision, if not 0, is the highest revision the history this
	// restore replaces is known to have reached. The bump is then counted
	// from it rather than from the snapshot's revision, when it is the
	// higher: a snapshot older than an earlier restore would otherwise
	// come back below revisions that restore's history handed out, and a
	// watcher holding one would be sent events of this history instead of
	// a compaction error. It needs BumpRevision.
	ReplacedRevision int64
	// Output receives the tool's stdout and stderr; default os.Stderr.
	Output io.Writer
	Logger *slog.Logger
}

// restoringSuffix names the directory the tool restores into, beside the
// data dir: only a complete restore is renamed into place, so an
// interrupted one never looks like a member's data.
const restoringSuffix = ".restoring"

// Validate checks what the hook rendered.
func (o ApplyOptions) Validate() error {
	var errs []error
	switch {
	case o.Etcdutl != "" && o.Etcdctl != "":
		errs = append(errs, errors.New("--etcdutl and --etcdctl name two tools; give one: etcdutl for etcd 3.5 and later, etcdctl before"))
	case o.Etcdutl == "" && o.Etcdctl == "":
		errs = append(errs, errors.New("no restore tool: give --etcdutl (etcd 3.5 and later) or --etcdctl (before 3.5)"))
	}
	for _, f := range []struct{ flag, value string }{
		{"--snapshot", o.Snapshot},
		{"--data-dir", o.DataDir},
		{"--name", o.Name},
		{"--initial-cluster", o.InitialCluster},
		{"--initial-advertise-peer-urls", o.InitialAdvertisePeerURLs},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.flag))
		}
	}
	if d := filepath.Clean(o.DataDir); o.DataDir != "" && d == filepath.Dir(d) {
		errs = append(errs, fmt.Errorf("--data-dir %q is a root directory; the restore is renamed into place beside it", o.DataDir))
	}
	if o.BumpRevision > 0 && !o.MarkCompacted {
		errs = append(errs, errors.New("--bump-revision needs --mark-compacted: etcd refuses one without the other"))
	}
	if o.MarkCompacted && o.BumpRevision == 0 {
		errs = append(errs, errors.New("--mark-compacted needs a --bump-revision above 0: etcd refuses one without the other"))
	}
	switch {
	case o.ReplacedRevision < 0:
		errs = append(errs, fmt.Errorf("--replaced-revision %d is negative", o.ReplacedRevision))
	case o.ReplacedRevision > 0 && o.BumpRevision == 0:
		errs = append(errs, errors.New("--replaced-revision needs a --bump-revision above 0: the bump is what lifts the store above it"))
	case o.ReplacedRevision > 0 && uint64(o.ReplacedRevision) > math.MaxInt64-o.BumpRevision:
		errs = append(errs, fmt.Errorf("--replaced-revision %d plus --bump-revision %d overflows etcd's 64-bit revision", o.ReplacedRevision, o.BumpRevision))
	}
	return errors.Join(errs...)
}

// Apply restores opts.Snapshot into opts.DataDir with the release's tool,
// unless the data dir already holds a member, in which case it changes
// nothing at all: that member may have written since its restore.
func Apply(ctx context.Context, opts ApplyOptions) report.RestoreResult {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := opts.Validate(); err != nil {
		return report.RestoreResult{Reason: err.Error()}
	}
	res := report.RestoreResult{Source: opts.Snapshot}
	dataDir := filepath.Clean(opts.DataDir)
	member := filepath.Join(dataDir, "member")
	switch _, err := os.Stat(member); {
	case err == nil:
		res.Succeeded, res.AlreadyRestored = true, true
		res.Reason = fmt.Sprintf("the data dir %s already holds a member (%s exists): nothing restored", dataDir, member)
		log.Info("already restored; nothing changed", "dataDir", dataDir)
		return res
	case !errors.Is(err, fs.ErrNotExist):
		res.Reason = fmt.Sprintf("cannot tell whether the member already has data: %v", err)
		log.Error("restore apply failed", "reason", res.Reason)
		return res
	}
	if err := restoreInto(ctx, opts, dataDir, log); err != nil {
		res.Reason = err.Error()
		log.Error("restore apply failed", "reason", res.Reason)
		return res
	}
	res.Succeeded = true
	res.Reason = fmt.Sprintf("restored %s into %s", opts.Snapshot, dataDir)
	log.Info("restored", "snapshot", opts.Snapshot, "dataDir", dataDir)
	return res
}

func restoreInto(ctx context.Context, opts ApplyOptions, dataDir string, log *slog.Logger) error {
	if _, err := os.Stat(opts.Snapshot); err != nil {
		return fmt.Errorf("the snapshot to restore is not there (restore-fetch places it): %w", err)
	}
	// An empty data dir (a fresh volume's, or one a Pod spec mounts) is
	// replaced; anything in it was not written by etcd as a member, and is
	// not ours to delete.
	entries, err := os.ReadDir(dataDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read the data dir: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("the data dir %s holds %q but no member directory; it is left as it is, and nothing is restored", dataDir, entries[0].Name())
	}
	parent := filepath.Dir(dataDir)
	restoring := dataDir + restoringSuffix
	if err := os.RemoveAll(restoring); err != nil {
		return fmt.Errorf("remove an interrupted restore: %w", err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("make the data dir's parent: %w", err)
	}

	tool, name, env := opts.Etcdutl, "etcdutl", os.Environ()
	if opts.Etcdctl != "" {
		tool, name, env = opts.Etcdctl, "etcdctl", append(env, "ETCDCTL_API=3")
	}
	args := []string{"snapshot", "restore", opts.Snapshot,
		"--data-dir", restoring,
		"--name", opts.Name,
		"--initial-cluster", opts.InitialCluster,
		"--initial-advertise-peer-urls", opts.InitialAdvertisePeerURLs,
	}
	if opts.InitialClusterToken != "" {
		args = append(args, "--initial-cluster-token", opts.InitialClusterToken)
	}
	if opts.BumpRevision > 0 {
		bump, err := bumpFor(opts)
		if err != nil {
			return err
		}
		log.Info("bumping the restored revision", "bump", bump, "replacedRevision", opts.ReplacedRevision)
		args = append(args, "--bump-revision", strconv.FormatUint(bump, 10))
	}
	if opts.MarkCompacted {
		args = append(args, "--mark-compacted")
	}
	out := opts.Output
	if out == nil {
		out = os.Stderr
	}
	tail := &tailWriter{max: 1024}
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = env
	// One writer for both, so exec gives the tool one pipe and its lines
	// arrive in order.
	w := io.MultiWriter(out, tail)
	cmd.Stdout, cmd.Stderr = w, w
	log.Info("restoring", "tool", tool, "args", args)
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(restoring)
		return fmt.Errorf("%s snapshot restore of %s failed (%w): %s", name, opts.Snapshot, err, lastWords(tail.String()))
	}
	if _, err := os.Stat(filepath.Join(restoring, "member")); err != nil {
		return fmt.Errorf("%s snapshot restore succeeded but left no member directory: %w", name, err)
	}
	// os.Remove, not RemoveAll: it removes only an empty directory.
	if err := os.Remove(dataDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("replace the empty data dir: %w", err)
	}
	if err := os.Rename(restoring, dataDir); err != nil {
		return fmt.Errorf("move the restored data dir into place: %w", err)
	}
	if err := syncDir(parent); err != nil {
		return fmt.Errorf("move the restored data dir into place: %w", err)
	}
	// The snapshot is as large as the database, on the member's volume;
	// it has served its purpose once the data dir is in place.
	for _, p := range []string{recordPath(opts.Snapshot), opts.Snapshot} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("the data dir is restored, but the snapshot could not be removed", "file", p, "error", err)
		}
	}
	return nil
}

// bumpFor is the --bump-revision the tool is given: opts.BumpRevision above
// the snapshot's revision or above opts.ReplacedRevision, whichever is the
// higher. The snapshot's revision is read from its database, as etcdutl
// reads it; restore-fetch verified the file before this step ran.
func bumpFor(opts ApplyOptions) (uint64, error) {
	if opts.ReplacedRevision == 0 {
		return opts.BumpRevision, nil
	}
	fi, err := os.Stat(opts.Snapshot)
	if err != nil {
		return 0, fmt.Errorf("read the snapshot's revision: %w", err)
	}
	db, err := readSnapshotDB(opts.Snapshot, fi.Size()-trailerSize)
	if err != nil {
		return 0, fmt.Errorf("read the snapshot's revision: %w", err)
	}
	bump := opts.BumpRevision
	if gap := opts.ReplacedRevision - db.Revision; gap > 0 {
		bump += uint64(gap)
	}
	if bump > math.MaxInt64-uint64(db.Revision) {
		return 0, fmt.Errorf("the snapshot's revision %d plus a bump of %d overflows etcd's 64-bit revision", db.Revision, bump)
	}
	return bump, nil
}

// tailWriter keeps the last max bytes written to it: the tool's last words,
// for the reason of a failure.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-w.max:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// lastWords is what a reason quotes of the tool's output: its "Error:"
// line (etcdutl and etcdctl print one last), else the output's tail, whose
// first, probably cut, line is dropped.
func lastWords(output string) string {
	lines := strings.Split(strings.TrimSpace(output), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "Error:") {
			return strings.TrimSpace(lines[i])
		}
	}
	if len(lines) > 1 {
		lines = lines[1:]
	}
	if s := strings.TrimSpace(strings.Join(lines, "\n")); s != "" {
		return s
	}
	return "no output"
}
