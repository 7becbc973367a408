package etcdtest

import (
	"strings"

	"github.com/etcdhook/etcd-hook/etcdclient"
)

// Dialer stands in for cluster DNS in tests that run the reconciler
// in-process: a member Pod's DNS client URL (<pod>.<cluster>.<ns>.svc) is
// mapped to the loopback URL of the etcd member of the same name.
type Dialer struct {
	Pool  *etcdclient.Pool
	ByPod map[string]string
}

// NewDialer maps the cluster's member names to their client URLs.
func NewDialer(pool *etcdclient.Pool, c *Cluster) Dialer {
	byPod := make(map[string]string, len(c.Members))
	for _, m := range c.Members {
		byPod[m.Name] = m.ClientURL
	}
	return Dialer{Pool: pool, ByPod: byPod}
}

// Cluster implements etcdclient.Dialer.
func (d Dialer) Cluster(endpoints []string, creds *etcdclient.ClientTLS) (etcdclient.Cluster, error) {
	real := make([]string, 0, len(endpoints))
	for _, ep := range endpoints {
		_, host, _ := strings.Cut(ep, "://")
		pod, _, _ := strings.Cut(host, ".")
		if url, ok := d.ByPod[pod]; ok {
			real = append(real, url)
		}
	}
	return d.Pool.Cluster(real, creds)
}
