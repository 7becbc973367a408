package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/etcdhook/etcd-hook/agent"
	"github.com/etcdhook/etcd-hook/agent/report"
)

// runBackup is "etcd-hook backup": the backup agent, run in a Pod. It takes
// one snapshot, stores it, writes the Result to the termination message,
// and exits non-zero when the run failed.
func runBackup(args []string) error {
	fs := flag.NewFlagSet("etcd-hook backup", flag.ContinueOnError)
	var dest destinationFlags
	dest.register(fs, `where the backup goes: "<bucket>/<key>"`)
	var (
		periodic   = fs.Bool("periodic", false, `name the object "<key>_v<revision>_<time>" and keep the newest --max-backups`)
		maxBackups = fs.Int("max-backups", 0, "with --periodic, how many backups to keep; 0 keeps all")
		timeout    = fs.Duration("timeout", 30*time.Minute, "bound on the whole run")
		resultFile = fs.String("result-file", "/dev/termination-log", "where the JSON result goes (the container's termination message)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	res := func() report.BackupResult {
		failed := func(err error) report.BackupResult {
			now := time.Now().UTC()
			return report.BackupResult{Reason: err.Error(), Start: now, End: now}
		}
		tc, err := dest.clientTLS()
		if err != nil {
			return failed(err)
		}
		store, base, err := dest.store()
		if err != nil {
			return failed(err)
		}
		return agent.Backup(ctx, agent.BackupOptions{
			Endpoints: dest.endpointList(), TLS: tc, Periodic: *periodic, MaxBackups: *maxBackups, Timeout: *timeout, Logger: logger,
		}, store, base)
	}()
	if err := agent.WriteResult(*resultFile, res); err != nil {
		logger.Error("cannot write the result", "file", *resultFile, "error", err)
	}
	if !res.Succeeded {
		return fmt.Errorf("backup failed: %w", errors.New(res.Reason))
	}
	return nil
}
