package e2e

import (
	"crypto/tls"
	"net/url"
	"strings"
	"sync"
)

// The client certificates of TLS clusters, by the DNS suffix of their
// members (<cluster>.<namespace>.svc), so that every client the scenarios
// make (writers, member lists, reads) calls a TLS cluster as an
// application would, with no helper needing to be told.
var (
	clientTLSMu sync.Mutex
	clientTLS   = map[string]*tls.Config{}
)

// UseClientTLS makes clients of the cluster's https URLs present cfg's
// certificate and trust its roots, until the returned func is called.
func UseClientTLS(cluster, namespace string, cfg *tls.Config) (forget func()) {
	key := cluster + "." + namespace + ".svc"
	clientTLSMu.Lock()
	clientTLS[key] = cfg
	clientTLSMu.Unlock()
	return func() {
		clientTLSMu.Lock()
		delete(clientTLS, key)
		clientTLSMu.Unlock()
	}
}

func clientTLSFor(suffix string) *tls.Config {
	clientTLSMu.Lock()
	defer clientTLSMu.Unlock()
	return clientTLS[suffix]
}

// clientTLSForURL is the configuration for an https URL of a registered
// cluster: a member (<member>.<cluster>.<ns>.svc) or its client Service
// (<cluster>-client.<ns>.svc). Plain URLs get none.
func clientTLSForURL(raw string) *tls.Config {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" {
		return nil
	}
	labels := strings.Split(u.Hostname(), ".")
	if len(labels) == 3 {
		return clientTLSFor(strings.TrimSuffix(labels[0], "-client") + "." + labels[1] + ".svc")
	}
	if len(labels) >= 4 {
		return clientTLSFor(strings.Join(labels[1:4], "."))
	}
	return nil
}
