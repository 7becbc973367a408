package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/reconcile"
)

func main() {
	run := run
	args := os.Args[1:]
	// One image, several modes: the hook by default, and the agents that
	// run in Pods the hook creates.
	if len(args) > 0 && args[0] == "backup" {
		run, args = runBackup, args[1:]
	}
	if len(args) > 0 && args[0] == "restore" {
		run, args = runRestore, args[1:]
	}
	if err := run(args); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-hook:", err)
		os.Exit(exitCode(err))
	}
}

// DefaultAgentImage is the image manifests/ deploys the hook with.
const DefaultAgentImage = "ghcr.io/etcdhook/etcd-hook:latest"

type config struct {
	addr            string
	shutdownTimeout time.Duration
	logLevel        slog.Level
	maxEtcdConns    int
	agentImage      string
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("etcd-hook", flag.ContinueOnError)
	fs.StringVar(&cfg.addr, "addr", ":8080", "address to serve the hooks, health and metrics on")
	// Longer than a sync can take (observation plus one bounded step), so
	// a sync in flight at SIGTERM completes.
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long to let requests in flight finish on SIGTERM")
	fs.IntVar(&cfg.maxEtcdConns, "max-idle-etcd-conns", etcdclient.DefaultMaxIdleConns, "etcd connections kept open between syncs, across all clusters")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.StringVar(&cfg.agentImage, "agent-image", DefaultAgentImage, "this project's image, which backup runs and the seed of a restored cluster start; keep it equal to the hook's own image")
	return cfg, fs.Parse(args)
}

func run(args []string) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))

	registry := prometheus.NewRegistry()
	metrics := newMetrics(registry)
	pool := etcdclient.NewPool(cfg.maxEtcdConns)
	defer pool.Close()
	reconciler := &reconcile.Reconciler{Dialer: pool, Recorder: metrics, Logger: logger, AgentImage: cfg.agentImage}

	ready := &readiness{}
	srv := &http.Server{
		Addr:              cfg.addr,
		Handler:           newRouter(reconciler, hooks.BackupConfig{AgentImage: cfg.agentImage}, metrics, registry, logger, ready),
		ReadHeaderTimeout: 5 * time.Second,
		// A sync takes at most a few seconds; Metacontroller gives up at
		// its hook timeout anyway.
		WriteTimeout: 30 * time.Second,
		IdleTimeout:  120 * time.Second,
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ListenAndServe() }()
	logger.Info("serving", "addr", cfg.addr)
	ready.set(true)

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	// Fail readiness first so the Service stops sending new syncs here,
	// then let the ones in flight finish.
	ready.set(false)
	logger.Info("shutting down", "timeout", cfg.shutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
