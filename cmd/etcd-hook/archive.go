package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/etcdhook/etcd-hook/agent"
	"github.com/etcdhook/etcd-hook/agent/report"
)

// runArchive is "etcd-hook archive": a continuous backup, run in a
// long-lived Pod. It stores every change of the cluster within
// --delta-interval, and full snapshots to replay them on, until it is
// stopped; it serves its status on --status-addr for the hook to read.
func runArchive(args []string) error {
	fs := flag.NewFlagSet("etcd-hook archive", flag.ContinueOnError)
	var (
		endpoints  = fs.String("endpoints", "", "comma-separated client URLs of the cluster's members")
		s3Path     = fs.String("s3-path", "", `where the backup goes: "<bucket>/<key>"; objects go under "<key>.pitr/"`)
		s3Endpoint = fs.String("s3-endpoint", "", "the S3 store's URL; empty for AWS S3")
		pathStyle  = fs.Bool("s3-force-path-style", false, "address the bucket in the path rather than the host name")
		awsDir     = fs.String("aws-dir", "/etc/etcd-backup/aws", `directory holding the AWS shared files "credentials" and "config" (the mounted awsSecret)`)
		dir        = fs.String("dir", "", "a volume destination instead of S3: the directory the claim is mounted at")
		file       = fs.String("file", "etcd.backup", "with --dir, the backup's path within it")
		volume     = fs.String("volume", "", "with --dir, the claim's name, for locations")
		delta      = fs.Duration("delta-interval", 5*time.Second, "every change is stored within this long (1s to 60s)")
		snapshots  = fs.Duration("snapshot-interval", 0, "time between full snapshots; 0 takes one only to begin a chain")
		maxSnaps   = fs.Int("max-snapshots", 0, "full snapshots to keep, each with the deltas after it; 0 keeps all")
		keyFile    = fs.String("key-file", "", "the mounted Secret key holding the 32-byte encryption key; empty stores objects unencrypted")
		compress   = fs.Bool("compress-snapshots", false, "store snapshots with zstd (deltas always are); etcdutl then no longer reads them as they are")
		spool      = fs.String("spool-dir", os.TempDir(), "where a snapshot is written between etcd and the store")
		statusAddr = fs.String("status-addr", ":"+strconv.Itoa(report.ArchiveStatusPort), "address to serve the status on")
		tlsFiles   agent.ClientTLSFiles
	)
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

	opts := agent.ArchiveOptions{
		DeltaInterval: *delta, SnapshotInterval: *snapshots, MaxSnapshots: *maxSnaps,
		CompressSnapshots: *compress, SpoolDir: *spool, Logger: logger,
	}
	for _, e := range strings.Split(*endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			opts.Endpoints = append(opts.Endpoints, e)
		}
	}
	if !tlsFiles.IsZero() {
		var err error
		var tc *tls.Config
		if tc, err = agent.LoadClientTLS(tlsFiles, time.Now()); err != nil {
			return err
		}
		opts.TLS = tc
	}
	if *keyFile != "" {
		key, err := agent.LoadKey(*keyFile)
		if err != nil {
			return err
		}
		opts.Key = key
	}
	var store agent.Store
	switch {
	case *dir != "" && *s3Path != "":
		return errors.New("--dir and --s3-path name two destinations; give one")
	case *dir != "":
		files, err := agent.NewFileStore(*dir, *volume)
		if err != nil {
			return err
		}
		store, opts.Base = files, *file
	default:
		profile, err := agent.LoadAWSProfile(*awsDir)
		if err != nil {
			return err
		}
		cfg := agent.S3Config{Path: *s3Path, Endpoint: *s3Endpoint, ForcePathStyle: *pathStyle, Profile: profile}
		s3, err := agent.NewS3Store(cfg)
		if err != nil {
			return err
		}
		store, opts.Base = s3, cfg.Key()
	}
	a, err := agent.NewArchiver(opts, store)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *statusAddr)
	if err != nil {
		return fmt.Errorf("the status address: %w", err)
	}
	srv := &http.Server{Handler: archiveStatusHandler(a), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	logger.Info("archiving", "endpoints", opts.Endpoints, "base", opts.Base, "delta interval", opts.DeltaInterval.String(), "status", ln.Addr().String())
	return a.Run(ctx)
}

// archiveStatusHandler serves the archiver's status as JSON, and a
// liveness answer.
func archiveStatusHandler(a *agent.Archiver) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+report.ArchiveStatusPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.Status())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}
