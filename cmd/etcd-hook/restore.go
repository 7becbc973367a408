package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/etcdhook/etcd-hook/agent"
	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/agent/report"
)

// runRestore is "etcd-hook restore fetch|apply": the two init containers
// of a restored cluster's seed member (see agent.Fetch and agent.Apply).
func runRestore(args []string) error {
	if len(args) == 0 {
		return errors.New(`restore: give a step: "restore fetch" or "restore apply"`)
	}
	switch args[0] {
	case "fetch":
		return runRestoreFetch(args[1:])
	case "apply":
		return runRestoreApply(args[1:])
	default:
		return fmt.Errorf(`restore: unknown step %q: "restore fetch" or "restore apply"`, args[0])
	}
}

// exitError carries an exit code other than 1 out of a mode.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the process's exit code for a mode's error: 0 for none, the
// code it carries, or 1.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}

type fetchFlags struct {
	opts       agent.FetchOptions
	resultFile string
}

func parseFetchFlags(args []string, output io.Writer) (fetchFlags, error) {
	var f fetchFlags
	fs := flag.NewFlagSet("etcd-hook restore fetch", flag.ContinueOnError)
	fs.SetOutput(output)
	var s3 agent.S3Source
	fs.StringVar(&s3.Path, "s3-path", "", `the backup in S3: "<bucket>/<key>"`)
	fs.StringVar(&s3.Endpoint, "s3-endpoint", "", "the S3 store's URL; empty for AWS S3")
	fs.BoolVar(&s3.ForcePathStyle, "s3-force-path-style", false, "address the bucket in the path rather than the host name")
	fs.StringVar(&s3.AWSDir, "aws-dir", "/etc/etcd-restore/aws", `directory holding the AWS shared files "credentials" and "config" (the mounted awsSecret)`)
	fs.StringVar(&f.opts.File, "file", "", "the backup as a file on a mounted volume, instead of S3")
	fs.StringVar(&f.opts.SHA256, "sha256", "", "the hex sha256 the whole snapshot must have; empty to check only etcd's own hash and the one stored with the backup")
	fs.StringVar(&f.opts.EtcdVersion, "etcd-version", "", "the cluster's etcd version; a snapshot of a newer minor release is refused")
	fs.StringVar(&f.opts.DataDir, "data-dir", "", "the member's data dir; if it holds a member already, nothing is fetched")
	fs.StringVar(&f.opts.Snapshot, "snapshot", "", "where the verified snapshot goes, on the member's data volume")
	fs.StringVar(&f.opts.ToolsDir, "tools-dir", "", "directory to copy this executable into, for the restore step in the etcd image")
	fs.DurationVar(&f.opts.Timeout, "timeout", 30*time.Minute, "bound on the whole run")
	fs.StringVar(&f.resultFile, "result-file", "/dev/termination-log", "where the JSON result goes (the container's termination message)")
	var chain agent.ChainFetch
	var continuous bool
	var at string
	fs.BoolVar(&continuous, "chain", false, "the backup is a continuous one: --s3-path or --file is its key, or the key of one of its snapshots; the state at --revision or --time is rebuilt")
	fs.Int64Var(&chain.Target.Revision, "revision", 0, "with --chain, the revision to restore; 0 and no --time for the newest stored")
	fs.StringVar(&at, "time", "", "with --chain, restore the state as of this moment (RFC 3339): the newest revision seen committed by then")
	fs.StringVar(&chain.KeyFile, "key-file", "", "with --chain, the mounted Secret key that opens an encrypted backup")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("restore fetch takes no arguments, got %q", fs.Args())
	}
	if s3.Path != "" {
		f.opts.S3 = &s3
	}
	if at != "" {
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return f, fmt.Errorf("--time %q is not an RFC 3339 time", at)
		}
		chain.Target.Time = t
	}
	switch {
	case continuous:
		if chain.Target.Revision != 0 && !chain.Target.Time.IsZero() {
			return f, errors.New("--revision and --time name two targets; give one")
		}
		f.opts.Chain = &chain
	case chain.Target != (archive.Target{}) || chain.KeyFile != "":
		return f, errors.New("--revision, --time and --key-file are for a continuous backup: add --chain")
	}
	return f, f.opts.Validate()
}

// runRestoreFetch exits 0 when the snapshot is in place (or the member
// already has data), report.ExitBackupUnusable when the backup cannot be
// restored at all, and 1 when a retry may succeed.
func runRestoreFetch(args []string) error {
	f, err := parseFetchFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		// Flags the hook rendered wrong: a bug a retry cannot fix, but not
		// the backup's, so not ExitBackupUnusable.
		return reportStep(f.resultFile, report.RestoreResult{Reason: err.Error()})
	}
	f.opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return reportStep(f.resultFile, agent.Fetch(ctx, f.opts))
}

// reportStep writes a step's result and turns a failed one into the mode's
// error, with its exit code.
func reportStep(resultFile string, res report.RestoreResult) error {
	if resultFile != "" {
		if err := agent.WriteRestoreResult(resultFile, res); err != nil {
			fmt.Fprintf(os.Stderr, "etcd-hook: cannot write the result to %s: %v\n", resultFile, err)
		}
	}
	if res.Succeeded {
		return nil
	}
	return &exitError{code: res.ExitCode(), err: fmt.Errorf("restore failed: %s", res.Reason)}
}

type applyFlags struct {
	opts       agent.ApplyOptions
	resultFile string
}

func parseApplyFlags(args []string, output io.Writer) (applyFlags, error) {
	var f applyFlags
	fs := flag.NewFlagSet("etcd-hook restore apply", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&f.opts.Etcdutl, "etcdutl", "", "the cluster's release of etcdutl (etcd 3.5 and later)")
	fs.StringVar(&f.opts.Etcdctl, "etcdctl", "", "the cluster's release of etcdctl (etcd before 3.5), run with ETCDCTL_API=3")
	fs.StringVar(&f.opts.Snapshot, "snapshot", "", "the snapshot restore fetch placed")
	fs.StringVar(&f.opts.DataDir, "data-dir", "", "the member's data dir; if it holds a member already, nothing changes")
	fs.StringVar(&f.opts.Name, "name", "", "the member's name")
	fs.StringVar(&f.opts.InitialCluster, "initial-cluster", "", "the restored cluster's --initial-cluster")
	fs.StringVar(&f.opts.InitialClusterToken, "initial-cluster-token", "", "the restored cluster's --initial-cluster-token")
	fs.StringVar(&f.opts.InitialAdvertisePeerURLs, "initial-advertise-peer-urls", "", "the member's peer URLs")
	fs.Uint64Var(&f.opts.BumpRevision, "bump-revision", 0, "raise the restored revision by this much (with --mark-compacted); 0 leaves it")
	fs.Int64Var(&f.opts.ReplacedRevision, "replaced-revision", 0, "the highest revision the replaced history reached: the bump is counted from it when it is above the snapshot's (with --bump-revision)")
	fs.BoolVar(&f.opts.MarkCompacted, "mark-compacted", false, "mark the restored revision compacted (with --bump-revision)")
	fs.StringVar(&f.resultFile, "result-file", "/dev/termination-log", "where the JSON result goes (the container's termination message)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("restore apply takes no arguments, got %q", fs.Args())
	}
	return f, f.opts.Validate()
}

// runRestoreApply exits 0 when the data dir holds the restored member (now
// or already), and 1 otherwise.
func runRestoreApply(args []string) error {
	f, err := parseApplyFlags(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return reportStep(f.resultFile, report.RestoreResult{Reason: err.Error()})
	}
	f.opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return reportStep(f.resultFile, agent.Apply(ctx, f.opts))
}
