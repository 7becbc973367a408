package main

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/reconcile"
	"github.com/etcdhook/etcd-hook/shard"
)

type readiness struct{ ok atomic.Bool }

func (r *readiness) set(ok bool) { r.ok.Store(ok) }

func newRouter(syncer hooks.Syncer[*reconcile.EarlyRead], backups hooks.BackupConfig, m *metrics, registry *prometheus.Registry, logger *slog.Logger, ready *readiness, sharding *shard.Router) http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Use(instrument(m, logger))
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		hooks.WriteError(w, http.StatusNotFound, "no such route; the hook serves POST /sync, /finalize, /customize, /backup/sync, /backup/finalize, /backup/customize, /restore/sync, /restore/finalize and /restore/customize")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		hooks.WriteError(w, http.StatusMethodNotAllowed, "method not allowed on this route")
	})

	// Every answered sync also feeds the per-object series.
	syncer = syncerWithMetrics(syncer, m.objects)
	backups.Observe = m.objects.recordBackup
	restores := hooks.RestoreConfig{Observe: m.objects.recordRestore}
	// A sync or finalize goes to the replica that owns its parent (with
	// --peers); customize hooks keep nothing and are answered anywhere.
	owned := func(h http.Handler) http.Handler { return h }
	if sharding != nil {
		owned = sharding.Handler
	}
	r.Method(http.MethodPost, "/sync", owned(hooks.SyncHandler(syncer)))
	r.Method(http.MethodPost, "/finalize", owned(hooks.FinalizeHandler(syncer)))
	r.Method(http.MethodPost, "/customize", hooks.CustomizeHandler())
	r.Route("/backup", func(r chi.Router) {
		r.Method(http.MethodPost, "/sync", owned(hooks.BackupSyncHandler(backups)))
		r.Method(http.MethodPost, "/finalize", owned(hooks.BackupFinalizeHandler(backups)))
		r.Method(http.MethodPost, "/customize", hooks.BackupCustomizeHandler())
	})
	r.Route("/restore", func(r chi.Router) {
		r.Method(http.MethodPost, "/sync", owned(hooks.RestoreHandler(restores)))
		r.Method(http.MethodPost, "/finalize", owned(hooks.RestoreHandler(restores)))
		r.Method(http.MethodPost, "/customize", hooks.RestoreCustomizeHandler())
	})
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	r.Get("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.ok.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	return r
}

// instrument times every request by route pattern (not by path, which a
// client controls) and logs the ones that fail.
func instrument(m *metrics, logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			route := chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				route = "unmatched"
			}
			m.observeRequest(route, ww.Status(), time.Since(start))
			if ww.Status() >= 400 {
				logger.Warn("request failed", "method", r.Method, "route", route, "status", ww.Status(), "duration", time.Since(start).String())
			}
		})
	}
}
