package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
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
	var (
		endpoints  = fs.String("endpoints", "", "comma-separated client URLs of the cluster's members")
		s3Path     = fs.String("s3-path", "", `where the backup goes: "<bucket>/<key>"`)
		s3Endpoint = fs.String("s3-endpoint", "", "the S3 store's URL; empty for AWS S3")
		pathStyle  = fs.Bool("s3-force-path-style", false, "address the bucket in the path rather than the host name")
		awsDir     = fs.String("aws-dir", "/etc/etcd-backup/aws", `directory holding the AWS shared files "credentials" and "config" (the mounted awsSecret)`)
		dir        = fs.String("dir", "", "a volume destination instead of S3: the directory the claim is mounted at")
		file       = fs.String("file", "etcd.backup", "with --dir, the backup's path within it")
		volume     = fs.String("volume", "", "with --dir, the claim's name, for the location in the result")
		periodic   = fs.Bool("periodic", false, `name the object "<key>_v<revision>_<time>" and keep the newest --max-backups`)
		maxBackups = fs.Int("max-backups", 0, "with --periodic, how many backups to keep; 0 keeps all")
		timeout    = fs.Duration("timeout", 30*time.Minute, "bound on the whole run")
		resultFile = fs.String("result-file", "/dev/termination-log", "where the JSON result goes (the container's termination message)")
		tlsFiles   agent.ClientTLSFiles
	)
	// etcdctl's names, as the CoreOS operator's users know them.
	fs.StringVar(&tlsFiles.Cert, "cert", "", "client certificate for members that serve TLS (https endpoints); with --key and --cacert")
	fs.StringVar(&tlsFiles.Key, "key", "", "the client certificate's private key")
	fs.StringVar(&tlsFiles.CA, "cacert", "", "the CA the members' server certificates are checked against")
	fs.StringVar(&tlsFiles.Secret, "tls-secret", "", "the Secret mounted with --cert, --key and --cacert, named when a file is missing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	res := func() report.BackupResult {
		var eps []string
		for _, e := range strings.Split(*endpoints, ",") {
			if e = strings.TrimSpace(e); e != "" {
				eps = append(eps, e)
			}
		}
		failed := func(err error) report.BackupResult {
			now := time.Now().UTC()
			return report.BackupResult{Reason: err.Error(), Start: now, End: now}
		}
		var tc *tls.Config
		if !tlsFiles.IsZero() {
			var err error
			if tc, err = agent.LoadClientTLS(tlsFiles, time.Now()); err != nil {
				return failed(err)
			}
		}
		var store agent.Store
		var base string
		switch {
		case *dir != "" && *s3Path != "":
			return failed(errors.New("--dir and --s3-path name two destinations; give one"))
		case *dir != "":
			files, err := agent.NewFileStore(*dir, *volume)
			if err != nil {
				return failed(err)
			}
			store, base = files, *file
		default:
			profile, err := agent.LoadAWSProfile(*awsDir)
			if err != nil {
				return failed(err)
			}
			cfg := agent.S3Config{Path: *s3Path, Endpoint: *s3Endpoint, ForcePathStyle: *pathStyle, Profile: profile}
			s3, err := agent.NewS3Store(cfg)
			if err != nil {
				return failed(err)
			}
			store, base = s3, cfg.Key()
		}
		return agent.Backup(ctx, agent.BackupOptions{
			Endpoints: eps, TLS: tc, Periodic: *periodic, MaxBackups: *maxBackups, Timeout: *timeout, Logger: logger,
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
