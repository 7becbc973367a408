package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/shard"
)

// How often the peers' name is resolved, and how long one lookup may take.
// A replica that joins or leaves is seen within peersRefresh plus the DNS
// server's own delay (the headless Service lists Ready replicas only).
const (
	peersRefresh = 5 * time.Second
	peersLookup  = 2 * time.Second
)

// newShardRouter is the middleware in front of the sync and finalize
// routes, or nil without --peers. Forwarded requests go over HTTPS when
// the hook serves it (certs set), to the port --peers names.
func newShardRouter(cfg config, certs *certReloader, m *metrics, logger *slog.Logger) (*shard.Router, *shard.Peers, error) {
	if cfg.peers == "" {
		return nil, nil, nil
	}
	// Peers named without a port serve where this replica does: HTTPS's
	// port when it serves TLS, which is where syncs are forwarded then.
	served := cfg.addr
	if certs != nil {
		served = cfg.tlsAddr
	}
	_, port, err := net.SplitHostPort(served)
	if err != nil {
		return nil, nil, fmt.Errorf("--peers: the port of %s: %w", served, err)
	}
	peers, err := shard.NewPeers(cfg.peers, cfg.peerAddress, port, net.DefaultResolver.LookupHost)
	if err != nil {
		return nil, nil, fmt.Errorf("--peers: %w", err)
	}
	transport := &http.Transport{
		Proxy: nil,
		// Short: a replica that does not take the connection is answered
		// for, here, within the sync's budget.
		DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 2 * time.Second,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     60 * time.Second,
	}
	scheme := "http"
	if certs != nil {
		scheme = "https"
		transport.TLSClientConfig = peerTLSConfig(certs)
	}
	m.peers = func() float64 { return float64(len(peers.Current())) }
	return &shard.Router{
		Peers: peers,
		Client: &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		Scheme:       scheme,
		MaxBodyBytes: hooks.MaxBodyBytes,
		Routed: func(o shard.Outcome, owner string, err error) {
			m.routing.WithLabelValues(string(o)).Inc()
			if err != nil {
				logger.Warn("sync not answered by its owner", "outcome", string(o), "owner", owner, "error", err.Error())
			}
		},
	}, peers, nil
}

// peerTLSConfig trusts a peer that serves this replica's own certificate:
// the replicas mount one Secret, so a peer proves it is one of them by
// holding its key. It needs no CA and no name, and a peer that has
// rotated before this replica did is refused for the moment, which only
// means syncs it owns are answered here until both serve the new pair.
func peerTLSConfig(certs *certReloader) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is not verified; VerifyConnection pins the certificate,
		// and the handshake's signature proves the peer holds its key.
		InsecureSkipVerify: true, //nolint:gosec // pinned below
		VerifyConnection: func(cs tls.ConnectionState) error {
			own, err := certs.getCertificate(nil)
			if err != nil || own == nil || len(own.Certificate) == 0 {
				return errors.New("this replica has no certificate to compare the peer's with")
			}
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, own.Certificate[0]) {
				return errors.New("the peer does not serve this replica's certificate")
			}
			return nil
		},
	}
}

// runPeers resolves the peers until ctx ends, logging a failed lookup
// once until one succeeds again.
func runPeers(ctx context.Context, peers *shard.Peers, logger *slog.Logger) {
	var last string
	peers.Run(ctx, peersRefresh, peersLookup, func(err error) {
		if err.Error() != last {
			logger.Warn("peers not resolved; the last ones resolved are kept", "error", err.Error())
		}
		last = err.Error()
	})
}
