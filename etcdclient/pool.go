package etcdclient

import (
	"slices"
	"time"
)

// Pool is the Dialer the hook runs with: every cluster's calls go through
// one cache of connections, shared by endpoint.
type Pool struct {
	conns *conns
	tls   *tlsConfigs
}

// Defaults of NewPool.
const (
	// DefaultMaxIdleConns bounds the connections kept between syncs. Each
	// costs 7 KiB of heap (19 KiB to a TLS member) and no goroutine
	// (TestConnectionCostReport), so 256 hold 2–5 MiB; a sync of a
	// cluster whose connections were closed pays a dial per member
	// instead.
	DefaultMaxIdleConns = 256
	// DefaultIdleTimeout closes the connections of clusters that are no
	// longer synced, such as deleted ones.
	DefaultIdleTimeout = 10 * time.Minute
)

// NewPool returns an empty pool that keeps at most maxIdleConns
// connections open between syncs (DefaultMaxIdleConns when not positive).
func NewPool(maxIdleConns int) *Pool {
	if maxIdleConns <= 0 {
		maxIdleConns = DefaultMaxIdleConns
	}
	return &Pool{conns: newConns(maxIdleConns, DefaultIdleTimeout), tls: newTLSConfigs(maxIdleConns)}
}

// Cluster implements Dialer.
func (p *Pool) Cluster(endpoints []string, creds *ClientTLS) (Cluster, error) {
	c := &cluster{conns: p.conns, endpoints: slices.Sorted(slices.Values(endpoints))}
	if creds != nil {
		cfg, err := p.tls.get(creds)
		if err != nil {
			return nil, err
		}
		c.tlsID, c.tls = creds.ID, cfg
	}
	return c, nil
}

// Close closes every connection; calls in flight fail.
func (p *Pool) Close() { p.conns.closeAll() }
