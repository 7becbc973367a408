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
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
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
	if len(args) > 0 && args[0] == "archive" {
		run, args = runArchive, args[1:]
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
	tlsAddr         string
	tlsCertFile     string
	tlsKeyFile      string
	shutdownTimeout time.Duration
	logLevel        slog.Level
	maxEtcdConns    int
	agentImage      string
	secretDelay     time.Duration
	resizeGrace     time.Duration
	peers           string
	peerAddress     string
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("etcd-hook", flag.ContinueOnError)
	fs.StringVar(&cfg.addr, "addr", ":8080", "address to serve the hooks, health and metrics on, over plain HTTP (probes, Prometheus, curl)")
	// Sync requests carry Secrets (TLS keys, S3 credentials) as related
	// objects, so in a cluster they must not cross the network in clear.
	fs.StringVar(&cfg.tlsCertFile, "tls-cert-file", "", "PEM certificate (chain) to also serve everything over HTTPS on --tls-addr, with --tls-key-file; "+
		"re-read when the file changes, so a mounted Secret rotates without a restart. In a cluster, Metacontroller must call the hooks on the HTTPS port: sync requests carry Secrets")
	fs.StringVar(&cfg.tlsKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&cfg.tlsAddr, "tls-addr", ":8443", "address to serve the hooks, health and metrics on over HTTPS, when --tls-cert-file is set")
	// Longer than a sync can take (observation plus one bounded step), so
	// a sync in flight at SIGTERM completes.
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long to let requests in flight finish on SIGTERM")
	fs.IntVar(&cfg.maxEtcdConns, "max-idle-etcd-conns", etcdclient.DefaultMaxIdleConns, "etcd connections kept open between syncs, across all clusters")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.StringVar(&cfg.agentImage, "agent-image", DefaultAgentImage, "this project's image, which backup runs and the seed of a restored cluster start; keep it equal to the hook's own image")
	fs.DurationVar(&cfg.secretDelay, "secret-propagation", etcdcluster.DefaultSecretPropagation, "how long the kubelets take to bring an updated Secret into a Pod (their sync period and Secret cache delay): "+
		"with spec.TLS.auto, a CA is trusted this long after the last leaf it signed was replaced")
	fs.DurationVar(&cfg.resizeGrace, "filesystem-resize-grace", etcdcluster.DefaultFilesystemResizeGrace, "how long a grown member claim may wait for its file system (FileSystemResizePending) before the member's Pod is rolled to mount it again")
	fs.StringVar(&cfg.peers, "peers", "", "spread syncs over the hook's replicas: entries host or host:port, comma-separated, each host an IP or a name resolved every 5 s "+
		"(in a cluster, a headless Service of the replicas); an entry without a port is at this replica's own (--tls-addr's when TLS is on, else --addr's). "+
		"Each parent is answered by one replica, which keeps its connections and memos; a replica forwards a sync it does not own. Empty: every replica answers every sync it receives")
	fs.StringVar(&cfg.peerAddress, "peer-address", "", "this replica's own address as --peers resolves it: an IP (the Pod's IP), or IP:port when replicas share an IP")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if (cfg.peers == "") != (cfg.peerAddress == "") {
		return cfg, errors.New("--peers and --peer-address are set together or not at all")
	}
	return cfg, cfg.checkTLS()
}

// checkTLS refuses TLS flags that cannot make one HTTPS server beside the
// plain one.
func (cfg config) checkTLS() error {
	switch {
	case (cfg.tlsCertFile == "") != (cfg.tlsKeyFile == ""):
		return errors.New("--tls-cert-file and --tls-key-file are set together or not at all")
	case cfg.tlsCertFile == "":
		return nil
	case cfg.tlsAddr == "":
		return errors.New("--tls-addr is empty: HTTPS needs an address of its own")
	case cfg.tlsAddr == cfg.addr:
		return fmt.Errorf("--tls-addr %q is also --addr: HTTPS needs an address of its own", cfg.tlsAddr)
	}
	return nil
}

func run(args []string) error {
	// Installed before anything listens: once the hook answers, SIGTERM
	// means a graceful shutdown.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return serve(ctx, args)
}

// serve runs the hook until ctx ends, then shuts it down gracefully: plain
// HTTP on --addr, and with --tls-cert-file the same router over HTTPS on
// --tls-addr.
func serve(ctx context.Context, args []string) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))

	var certs *certReloader
	if cfg.tlsCertFile != "" {
		if certs, err = newCertReloader(cfg.tlsCertFile, cfg.tlsKeyFile, logger); err != nil {
			return err
		}
	}

	registry := prometheus.NewRegistry()
	metrics := newMetrics(registry)
	pool := etcdclient.NewPool(cfg.maxEtcdConns)
	defer pool.Close()
	reconciler := &reconcile.Reconciler{Dialer: pool, Recorder: metrics, Logger: logger, AgentImage: cfg.agentImage, SecretPropagation: cfg.secretDelay, FilesystemResizeGrace: cfg.resizeGrace}

	sharding, peers, err := newShardRouter(cfg, certs, metrics, logger)
	if err != nil {
		return err
	}
	if peers != nil {
		peersCtx, stopPeers := context.WithCancel(context.Background())
		defer stopPeers()
		// Resolved once before the first sync, so that a replica does not
		// answer the whole fleet until its first refresh.
		_ = peers.Refresh(ctx, peersLookup)
		go runPeers(peersCtx, peers, logger)
	}

	ready := &readiness{}
	router := newRouter(reconciler, hooks.BackupConfig{AgentImage: cfg.agentImage}, metrics, registry, logger, ready, sharding)
	servers := []*hookServer{{Server: newHTTPServer(cfg.addr, router, logger), scheme: "http"}}
	if certs != nil {
		srv := newHTTPServer(cfg.tlsAddr, router, logger)
		srv.TLSConfig = certs.serverConfig()
		servers = append(servers, &hookServer{Server: srv, scheme: "https"})
	}
	// Every address is bound before any is served, so that a port in use
	// fails the start instead of leaving the hook half up.
	for _, s := range servers {
		if err := s.listen(); err != nil {
			closeListeners(servers)
			return err
		}
	}

	serveErr := make(chan error, len(servers))
	for _, s := range servers {
		go func() { serveErr <- s.serve() }()
		logger.Info("serving", "addr", s.Addr, "scheme", s.scheme)
	}
	ready.set(true)

	var failed error
	select {
	case failed = <-serveErr:
		// One server stopped by itself: stop the other too, rather than
		// serve health on one port and no hooks on the other.
		logger.Error("a server stopped; shutting down", "error", failed.Error())
	case <-ctx.Done():
	}
	// Fail readiness first so the Service stops sending new syncs here,
	// then let the ones in flight finish.
	ready.set(false)
	logger.Info("shutting down", "timeout", cfg.shutdownTimeout.String())
	errs := []error{failed, shutdown(servers, cfg.shutdownTimeout)}
	// The others' Serve returned http.ErrServerClosed as Shutdown began;
	// the one that failed has reported already.
	remaining := len(servers)
	if failed != nil {
		remaining--
	}
	for range remaining {
		if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
