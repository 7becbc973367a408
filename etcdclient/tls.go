package etcdclient

import (
	"container/list"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
)

// ClientTLS is what a cluster whose members serve TLS is called with: a
// client certificate, and the CA the members' server certificates are
// checked against. It comes from a Secret the sync request carries; the
// hook never writes it anywhere.
type ClientTLS struct {
	// ID names this version of the material, such as the Secret's UID and
	// resourceVersion. The parsed configuration and the connections made
	// with it are kept by ID: a rotated Secret has a new ID, and the next
	// sync dials with the new certificate.
	ID            string
	Cert, Key, CA []byte
}

// ParseClientTLS builds the configuration of one client certificate. Each
// error names the part it is about: cert, key or CA.
func ParseClientTLS(cert, key, ca []byte) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("client certificate and key: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, errors.New("CA: no PEM certificate found")
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		RootCAs:      roots,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// tlsConfigs keeps the parsed configurations by ID, so that a steady sync
// parses no certificate. Bounded like the connections: a hook serving a
// thousand TLS clusters keeps at most max.
type tlsConfigs struct {
	max int

	mu   sync.Mutex
	byID map[string]*list.Element // of *tlsEntry
	lru  list.List
}

type tlsEntry struct {
	id  string
	cfg *tls.Config
}

func newTLSConfigs(max int) *tlsConfigs {
	return &tlsConfigs{max: max, byID: map[string]*list.Element{}}
}

func (t *tlsConfigs) get(m *ClientTLS) (*tls.Config, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if el, ok := t.byID[m.ID]; ok {
		t.lru.MoveToFront(el)
		return el.Value.(*tlsEntry).cfg, nil
	}
	cfg, err := ParseClientTLS(m.Cert, m.Key, m.CA)
	if err != nil {
		return nil, err
	}
	t.byID[m.ID] = t.lru.PushFront(&tlsEntry{id: m.ID, cfg: cfg})
	for t.lru.Len() > t.max {
		old := t.lru.Back()
		t.lru.Remove(old)
		delete(t.byID, old.Value.(*tlsEntry).id)
	}
	return cfg, nil
}
