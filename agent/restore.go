package agent

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/agent/report"
)

// A restored cluster's seed member gets two init containers. The first,
// "etcd-hook restore fetch" (Fetch), runs in this project's image: it
// fetches the backup, verifies it, places it on the member's data volume,
// and copies this executable into a tools volume. The second, "etcd-hook
// restore apply" (Apply), runs that copy in the etcd image of the cluster's
// version, so that the snapshot is restored by that release's own etcdutl.
// A Pod sandbox restart re-runs both, possibly over a data dir the member
// has written to since: both then change nothing.

// WriteRestoreResult writes r where the kubelet reads the termination
// message.
func WriteRestoreResult(path string, r report.RestoreResult) error {
	return writeTerminationMessage(path, &r, &r.Reason)
}

// unusableError marks a failure as the backup's own: another attempt would
// fail the same way.
type unusableError struct{ err error }

func (e *unusableError) Error() string { return e.err.Error() }
func (e *unusableError) Unwrap() error { return e.err }

func unusable(err error) error { return &unusableError{err} }

func isUnusable(err error) bool {
	var u *unusableError
	return errors.As(err, &u)
}

// FetchOptions is one "etcd-hook restore fetch".
type FetchOptions struct {
	// The backup: exactly one of S3 and File.
	S3   *S3Source
	File string
	// Chain, if set, reads a continuous backup and rebuilds the state at
	// its target (chainfetch.go).
	Chain *ChainFetch
	// SHA256, if set, is the hex sha256 the whole snapshot must have.
	SHA256 string
	// EtcdVersion is the cluster's etcd release: a snapshot of a newer minor
	// release is refused, as etcd cannot read its storage.
	EtcdVersion string
	// DataDir is the member's data dir; a "member" directory in it means
	// the member has data, and nothing is fetched.
	DataDir string
	// Snapshot is where the verified snapshot goes, on the data volume.
	Snapshot string
	// ToolsDir, if set, receives a copy of Executable (default: this
	// process's own) as ToolsExecutable.
	ToolsDir   string
	Executable string
	// Timeout bounds the whole run.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Validate checks what the hook rendered.
func (o FetchOptions) Validate() error {
	var errs []error
	switch {
	case o.S3 != nil && o.File != "":
		errs = append(errs, errors.New("--s3-path and --file name two backups; give one"))
	case o.S3 == nil && o.File == "":
		errs = append(errs, errors.New("no backup to restore: give --s3-path or --file"))
	case o.S3 != nil && o.S3.Path == "":
		errs = append(errs, errors.New(`--s3-path is empty; it is "<bucket>/<key>"`))
	}
	if o.Chain != nil && o.SHA256 != "" {
		errs = append(errs, errors.New("--sha256 names one snapshot; a continuous backup's state is rebuilt, and checked as it is"))
	}
	if o.SHA256 != "" {
		if b, err := hex.DecodeString(o.SHA256); err != nil || len(b) != 32 {
			errs = append(errs, fmt.Errorf("--sha256 %q is not a sha256 in hex (64 digits)", o.SHA256))
		}
	}
	if o.EtcdVersion == "" {
		errs = append(errs, errors.New("--etcd-version is required: a snapshot of a newer etcd than the cluster's is refused"))
	} else if _, err := minorOf(o.EtcdVersion); err != nil {
		errs = append(errs, fmt.Errorf("--etcd-version: %w", err))
	}
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	if o.Snapshot == "" {
		errs = append(errs, errors.New("--snapshot is required"))
	}
	return errors.Join(errs...)
}

func (o FetchOptions) source(log *slog.Logger) snapshotSource {
	if o.S3 != nil {
		return s3Source{cfg: *o.S3, log: log}
	}
	return fileSource{path: o.File}
}

// Fetch places a verified snapshot at opts.Snapshot, unless the member
// already has data, and copies the tools either way. Every check is made
// before the snapshot is renamed into place, so a file there is always one
// that passed them: etcd's sha256 trailer, the object's sha256 against
// opts.SHA256 and against the one stored with it, a bbolt database with
// etcd's buckets, and an etcd release no newer than the cluster's.
func Fetch(ctx context.Context, opts FetchOptions) report.RestoreResult {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := opts.Validate(); err != nil {
		return report.RestoreResult{Reason: err.Error()}
	}
	src := opts.source(log)
	res := report.RestoreResult{Source: src.location()}
	if opts.Chain != nil {
		res.Source = opts.chainSourceName()
	}
	fail := func(err error) report.RestoreResult {
		res.Succeeded, res.Permanent, res.Reason = false, isUnusable(err), err.Error()
		log.Error("restore fetch failed", "source", res.Source, "permanent", res.Permanent, "reason", res.Reason)
		return res
	}
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, opts.Timeout, fmt.Errorf("the fetch took longer than its timeout of %s", opts.Timeout))
		defer cancel()
	}

	if opts.ToolsDir != "" {
		exe := opts.Executable
		if exe == "" {
			var err error
			if exe, err = os.Executable(); err != nil {
				return fail(fmt.Errorf("find this executable to copy into the tools volume: %w", err))
			}
		}
		if err := installExecutable(exe, opts.ToolsDir); err != nil {
			return fail(err)
		}
	}

	member := filepath.Join(opts.DataDir, "member")
	switch _, err := os.Stat(member); {
	case err == nil:
		res.Succeeded, res.AlreadyRestored = true, true
		res.Reason = fmt.Sprintf("the data dir %s already holds a member (%s exists): nothing fetched", opts.DataDir, member)
		log.Info("already restored", "dataDir", opts.DataDir)
		return res
	case !errors.Is(err, fs.ErrNotExist):
		return fail(fmt.Errorf("cannot tell whether the member already has data: %w", err))
	}

	if prev, ok := reuse(opts, res.Source, log); ok {
		prev.Succeeded, prev.Permanent = true, false
		prev.Reason = fmt.Sprintf("%s was fetched and verified by an earlier run (sha256 %s, revision %d); it is at %s", prev.Source, prev.SHA256, prev.Revision, opts.Snapshot)
		log.Info("reusing the snapshot an earlier run verified", "snapshot", opts.Snapshot, "sha256", prev.SHA256)
		return prev
	}

	var got verified
	var err error
	if opts.Chain != nil {
		got, err = fetchChain(ctx, opts, &res, log)
	} else {
		got, err = download(ctx, opts, src, log)
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)) {
			err = cause(ctx, err)
		}
		return fail(err)
	}
	res.Size, res.SHA256, res.Revision, res.EtcdVersion = got.Size, got.SHA256, got.Revision, got.EtcdVersion
	res.Succeeded = true
	res.Reason = fmt.Sprintf("fetched and verified %s (%d bytes, sha256 %s, revision %d); it is at %s", res.Source, res.Size, res.SHA256, res.Revision, opts.Snapshot)
	// The record of the verified result goes after the rename: a record
	// always describes the file beside it, and a lost one costs a download.
	if err := writeJSONFile(recordPath(opts.Snapshot), res); err != nil {
		log.Warn("the snapshot is in place, but its record is not; a rerun fetches it again", "error", err)
	}
	log.Info("snapshot fetched", "source", res.Source, "snapshot", opts.Snapshot, "size", res.Size, "sha256", res.SHA256, "revision", res.Revision, "etcdVersion", res.EtcdVersion)
	return res
}

func recordPath(snapshot string) string { return snapshot + metaSuffix }

const snapshotPartialInfix = ".partial-"

// reuse returns the record of a snapshot an earlier run placed at
// opts.Snapshot, if it is from the same source (and has the sha256 asked
// for) and the file still passes every local check. Anything less, and the
// snapshot is fetched again.
func reuse(opts FetchOptions, source string, log *slog.Logger) (report.RestoreResult, bool) {
	data, err := os.ReadFile(recordPath(opts.Snapshot))
	if err != nil {
		return report.RestoreResult{}, false
	}
	var prev report.RestoreResult
	if err := json.Unmarshal(data, &prev); err != nil {
		log.Warn("the record of an earlier fetch is unreadable; fetching again", "error", err)
		return report.RestoreResult{}, false
	}
	if prev.Source != source || (opts.SHA256 != "" && !strings.EqualFold(prev.SHA256, opts.SHA256)) {
		log.Info("an earlier fetch placed another snapshot; fetching again", "had", prev.Source, "sha256", prev.SHA256)
		return report.RestoreResult{}, false
	}
	got, err := verifyLocal(opts, opts.Snapshot, prev.EtcdVersion)
	if err == nil && (got.SHA256 != prev.SHA256 || got.Size != prev.Size) {
		err = fmt.Errorf("its sha256 is %s (%d bytes), but the record says %s (%d bytes)", got.SHA256, got.Size, prev.SHA256, prev.Size)
	}
	if err != nil {
		log.Warn("the snapshot an earlier fetch placed no longer checks out; fetching again", "snapshot", opts.Snapshot, "error", err)
		return report.RestoreResult{}, false
	}
	prev.Revision, prev.EtcdVersion = got.Revision, got.EtcdVersion
	return prev, true
}

// verified is what the checks established about a snapshot file.
type verified struct {
	Size        int64
	SHA256      string
	Revision    int64
	EtcdVersion string
}

// verifyLocal re-checks a snapshot file: its trailer, database and release.
// storedVersion is the release the backup's metadata named.
func verifyLocal(opts FetchOptions, path, storedVersion string) (verified, error) {
	f, err := os.Open(path)
	if err != nil {
		return verified{}, err
	}
	defer f.Close()
	v := newVerifyingReader(f)
	if _, err := io.Copy(io.Discard, v); err != nil {
		return verified{}, err
	}
	return check(opts, path, path, v, storedVersion, "")
}

// download streams the backup into a temporary file beside opts.Snapshot,
// checks it, and renames it into place.
func download(ctx context.Context, opts FetchOptions, src snapshotSource, log *slog.Logger) (got verified, err error) {
	dir := filepath.Dir(opts.Snapshot)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return got, fmt.Errorf("make the snapshot's directory: %w", err)
	}
	// Left by runs that were killed mid-download; each may be as large as
	// the database, on the member's own volume.
	old, _ := filepath.Glob(opts.Snapshot + snapshotPartialInfix + "*")
	for _, p := range old {
		_ = os.Remove(p)
	}
	stored, err := src.open(ctx)
	if err != nil {
		return got, err
	}
	defer stored.body.Close()
	log.Info("fetching the snapshot", "source", src.location(), "size", stored.size, "snapshot", opts.Snapshot)

	// CreateTemp's mode, 0600, stays: a snapshot holds every Secret of the
	// Kubernetes cluster it came from. The restore step must run as the
	// same user as this one.
	out, err := os.CreateTemp(dir, filepath.Base(opts.Snapshot)+snapshotPartialInfix+"*")
	if err != nil {
		return got, fmt.Errorf("write the snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(out.Name())
		}
	}()
	name := "the backup " + src.location()
	v := newVerifyingReader(stored.body)
	if _, err := io.Copy(out, ctxReader{ctx, v}); err != nil {
		if errors.Is(err, ErrSnapshotIntegrity) {
			return got, unusable(fmt.Errorf("%s is corrupt or truncated: %w", name, err))
		}
		return got, fmt.Errorf("download %s: %w", name, err)
	}
	if stored.size >= 0 && v.Size() != stored.size {
		return got, fmt.Errorf("download %s: it ended after %d of its %d bytes", name, v.Size(), stored.size)
	}
	// No fsync: the snapshot is not the member's data. A file torn by a
	// crash fails the full re-check a rerun makes before reusing it (see
	// reuse), and etcd's own tool checks the trailer again as it restores.
	// Syncing hundreds of MiB would only delay the restore.
	if err := out.Close(); err != nil {
		return got, fmt.Errorf("write the snapshot: %w", err)
	}
	got, err = check(opts, name, out.Name(), v, stored.meta[MetaVersion], stored.meta[MetaSHA256])
	if err != nil {
		return got, err
	}
	// An older record must not outlive the snapshot it describes.
	if err := os.Remove(recordPath(opts.Snapshot)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return got, fmt.Errorf("remove the record of an earlier fetch: %w", err)
	}
	if err := os.Rename(out.Name(), opts.Snapshot); err != nil {
		return got, fmt.Errorf("write the snapshot: %w", err)
	}
	return got, nil
}

// check makes the checks that follow a complete read through v (etcd's
// trailer already passed): the sha256 asked for and the one stored with
// the backup, the database, and its release. name is the backup in
// reasons; path is the file holding it.
func check(opts FetchOptions, name, path string, v *verifyingReader, storedVersion, storedSHA256 string) (verified, error) {
	got := verified{Size: v.Size(), SHA256: v.ObjectSHA256()}
	if opts.SHA256 != "" && !strings.EqualFold(got.SHA256, opts.SHA256) {
		return got, unusable(fmt.Errorf("%s has sha256 %s, but the restore asks for %s: it is not the backup that was meant", name, got.SHA256, strings.ToLower(opts.SHA256)))
	}
	if storedSHA256 != "" && !strings.EqualFold(got.SHA256, storedSHA256) {
		return got, unusable(fmt.Errorf("%s has sha256 %s, but the sha256 stored with it says %s: it was changed after the backup", name, got.SHA256, storedSHA256))
	}
	db, err := readSnapshotDB(path, got.Size-trailerSize)
	if errors.Is(err, ErrNotEtcdSnapshot) {
		return got, unusable(fmt.Errorf("%s cannot be restored: %w", name, err))
	}
	if err != nil {
		return got, fmt.Errorf("read the snapshot's database: %w", err)
	}
	got.Revision = db.Revision

	// Both names of the release are checked: the metadata is preferred in
	// the result, being exact, but the database's own storage version is
	// the one etcd will act on.
	cluster, _ := minorOf(opts.EtcdVersion)
	got.EtcdVersion = db.StorageVersion
	if storedVersion != "" {
		got.EtcdVersion = storedVersion
	}
	for _, written := range []string{storedVersion, db.StorageVersion} {
		if written == "" {
			continue
		}
		m, err := minorOf(written)
		if err != nil {
			return got, unusable(fmt.Errorf("%s names the etcd release that wrote it as %q: %w", name, written, err))
		}
		if m.newerThan(cluster) {
			return got, unusable(fmt.Errorf("%s was written by etcd %s, and the cluster runs etcd %s: etcd cannot restore a snapshot of a newer minor release", name, written, opts.EtcdVersion))
		}
	}
	return got, nil
}
