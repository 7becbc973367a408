package etcdclient

import (
	"log/slog"
	"slices"
	gosync "sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Pool caches clients per cluster and closes those of clusters that have
// not been synced for IdleTimeout, so deleted clusters cost nothing.
type Pool struct {
	IdleTimeout time.Duration
	Logger      *slog.Logger

	mu       gosync.Mutex
	clusters map[string]*pooled
	now      func() time.Time
}

type pooled struct {
	*cluster
	lastUsed time.Time
}

// NewPool returns an empty pool.
func NewPool() *Pool {
	return &Pool{IdleTimeout: 10 * time.Minute, clusters: map[string]*pooled{}, now: time.Now}
}

// Cluster implements Dialer.
func (p *Pool) Cluster(key string, endpoints []string) (Cluster, error) {
	endpoints = slices.Sorted(slices.Values(endpoints))
	p.mu.Lock()
	now := p.now()
	p.evictIdle(now)
	c, ok := p.clusters[key]
	if !ok {
		c = &pooled{cluster: &cluster{each: map[string]*clientv3.Client{}, newClient: newClient}}
		p.clusters[key] = c
	}
	c.lastUsed = now
	p.mu.Unlock()
	if err := c.setEndpoints(endpoints); err != nil {
		return nil, wrap("etcd client", err)
	}
	return c.cluster, nil
}

func (p *Pool) evictIdle(now time.Time) {
	for key, c := range p.clusters {
		if now.Sub(c.lastUsed) > p.IdleTimeout {
			go c.close()
			delete(p.clusters, key)
		}
	}
}

// Close closes every client.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, c := range p.clusters {
		c.close()
		delete(p.clusters, key)
	}
}

func newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          CallTimeout,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// The client's own retries would outlive a sync's budget; the next
		// sync is the retry.
		MaxUnaryRetries: 1,
		Logger:          zap.NewNop(),
		// gRPC's default reconnect backoff grows to 120 s. A member that
		// restarts (every member does, in an upgrade) fails the Status of
		// each sync meanwhile, and the hook would then not see it back for
		// as long as the backoff had grown: the rollout waits on it.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: CallTimeout,
		})},
	})
}
