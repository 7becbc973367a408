package main

import (
	"context"
	"encoding/json"
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
	var dest destinationFlags
	dest.register(fs, `where the backup goes: "<bucket>/<key>"; objects go under "<key>.pitr/"`)
	var (
		delta      = fs.Duration("delta-interval", 5*time.Second, "every change is stored within this long (1s to 60s)")
		snapshots  = fs.Duration("snapshot-interval", 0, "time between full snapshots; 0 takes one only to begin a chain")
		maxSnaps   = fs.Int("max-snapshots", 0, "full snapshots to keep, each with the deltas after it; 0 keeps all")
		keyFile    = fs.String("key-file", "", "the mounted Secret key holding the 32-byte encryption key; empty stores objects unencrypted")
		compress   = fs.Bool("compress-snapshots", false, "store snapshots with zstd (deltas always are); etcdutl then no longer reads them as they are")
		spool      = fs.String("spool-dir", os.TempDir(), "where a snapshot is written between etcd and the store")
		statusAddr = fs.String("status-addr", ":"+strconv.Itoa(report.ArchiveStatusPort), "address to serve the status on")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	opts := agent.ArchiveOptions{
		Endpoints: dest.endpointList(), DeltaInterval: *delta, SnapshotInterval: *snapshots, MaxSnapshots: *maxSnaps,
		CompressSnapshots: *compress, SpoolDir: *spool, Logger: logger,
	}
	var err error
	if opts.TLS, err = dest.clientTLS(); err != nil {
		return err
	}
	if *keyFile != "" {
		if opts.Key, err = agent.LoadKey(*keyFile); err != nil {
			return err
		}
	}
	store, base, err := dest.store()
	if err != nil {
		return err
	}
	opts.Base = base
	a, err := agent.NewArchiver(opts, store)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", listenAddr(*statusAddr))
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
	mux.HandleFunc("GET "+report.ArchiveReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		if !a.Status().Chained() {
			http.Error(w, "no chain yet: taking the first snapshot, or listing the store", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// listenAddr brackets an IPv6 host given bare, as "$(POD_IP):8080"
// expands to on an IPv6 Pod network.
func listenAddr(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if i := strings.LastIndexByte(addr, ':'); i > 0 && strings.Count(addr, ":") > 1 {
		return net.JoinHostPort(addr[:i], addr[i+1:])
	}
	return addr
}
