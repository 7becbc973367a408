package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// hookServer is one of the hook's servers: plain HTTP on --addr, which
// probes, Prometheus and curl use, and with --tls-cert-file HTTPS on
// --tls-addr, which Metacontroller uses in a cluster. Both serve the same
// router.
type hookServer struct {
	*http.Server
	scheme   string // "http" or "https" (TLSConfig set)
	listener net.Listener
}

// newHTTPServer is a server of the router on addr with the hook's timeouts.
func newHTTPServer(addr string, handler http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		// A sync takes at most a few seconds; Metacontroller gives up at
		// its hook timeout anyway.
		WriteTimeout: 30 * time.Second,
		IdleTimeout:  120 * time.Second,
		// The server's own errors, such as a TLS handshake refused by a
		// Metacontroller that does not trust the certificate, go to the
		// structured log with everything else.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// listen binds the server's address.
func (s *hookServer) listen() error {
	l, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen for %s on %s: %w", s.scheme, s.Addr, err)
	}
	s.listener = l
	return nil
}

// serve serves on the bound listener until Shutdown; it then returns
// http.ErrServerClosed.
func (s *hookServer) serve() error {
	var err error
	if s.TLSConfig != nil {
		// The certificate comes from TLSConfig.GetCertificate.
		err = s.ServeTLS(s.listener, "", "")
	} else {
		err = s.Serve(s.listener)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return fmt.Errorf("serve %s on %s: %w", s.scheme, s.Addr, err)
}

// shutdown stops every server at once, each letting its requests in
// flight finish within the one timeout.
func shutdown(servers []*hookServer, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			if err := s.Shutdown(ctx); err != nil {
				errs[i] = fmt.Errorf("shutdown %s on %s: %w", s.scheme, s.Addr, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// closeListeners releases the addresses bound so far when the start fails.
func closeListeners(servers []*hookServer) {
	for _, s := range servers {
		if s.listener != nil {
			_ = s.listener.Close()
		}
	}
}
