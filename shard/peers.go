package shard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Lookup resolves a host name to addresses; net.DefaultResolver.LookupHost
// in the hook.
type Lookup func(ctx context.Context, host string) ([]string, error)

// Peers is the set of replicas syncs are spread over: the addresses of a
// comma-separated list of entries, host or host:port, each host an IP
// (kept as it is) or a name (resolved, every address it has at that
// port). An entry without a port is at this replica's own port: replicas
// of one Deployment serve on the same one. In a cluster the one entry is a
// headless Service, which lists the Ready replicas.
//
// Resolving happens in Run, never on a sync's path: a sync reads the last
// set resolved. A lookup that fails keeps the previous set, so a DNS
// hiccup does not move the fleet.
type Peers struct {
	entries []entry
	self    netip.AddrPort
	lookup  Lookup

	mu      sync.RWMutex
	current []string
	err     error
}

type entry struct {
	host, port string
	addr       netip.Addr // valid when host is an IP
}

// NewPeers parses the entries (host or host:port, comma-separated; a
// host alone is at port) and this replica's own address as the entries
// list it: an IP, or IP:port when the replicas share an IP (tests on
// loopback).
func NewPeers(spec, self, port string, lookup Lookup) (*Peers, error) {
	p := &Peers{lookup: lookup}
	for _, e := range strings.Split(spec, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		host, port, err := splitPeer(e, port)
		if err != nil {
			return nil, err
		}
		en := entry{host: host, port: port}
		if a, err := netip.ParseAddr(host); err == nil {
			en.addr = a
		}
		p.entries = append(p.entries, en)
	}
	if len(p.entries) == 0 {
		return nil, errors.New("no peers given")
	}
	if ap, err := netip.ParseAddrPort(self); err == nil {
		p.self = ap
	} else if a, err := netip.ParseAddr(self); err == nil {
		p.self = netip.AddrPortFrom(a, 0)
	} else {
		return nil, fmt.Errorf("this replica's address %q is neither an IP nor IP:port", self)
	}
	return p, nil
}

// splitPeer splits an entry into host and port, the port def when the
// entry has none.
func splitPeer(e, def string) (host, port string, err error) {
	if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
		return a.String(), def, checkPort(e, def)
	}
	if !strings.Contains(e, ":") {
		return e, def, checkPort(e, def)
	}
	host, port, err = net.SplitHostPort(e)
	if err != nil || host == "" || port == "" {
		return "", "", fmt.Errorf("peer %q is neither host nor host:port", e)
	}
	return host, port, nil
}

func checkPort(e, port string) error {
	if port == "" {
		return fmt.Errorf("peer %q has no port, and this replica's own is not known", e)
	}
	return nil
}

// Self reports whether peer (an address Current returned) is this replica.
func (p *Peers) Self(peer string) bool {
	ap, err := netip.ParseAddrPort(peer)
	if err != nil {
		return false
	}
	return ap.Addr().Unmap() == p.self.Addr().Unmap() && (p.self.Port() == 0 || ap.Port() == p.self.Port())
}

// SelfName is this replica's address as the answers it gives name it.
func (p *Peers) SelfName() string {
	if p.self.Port() == 0 {
		return p.self.Addr().String()
	}
	return p.self.String()
}

// Current is the last set resolved, sorted; nil before the first.
func (p *Peers) Current() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.current
}

// Err is the last lookup's error, nil when it resolved.
func (p *Peers) Err() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.err
}

// Refresh resolves the entries once, each lookup bounded by timeout.
func (p *Peers) Refresh(ctx context.Context, timeout time.Duration) error {
	var found []string
	for _, e := range p.entries {
		if e.addr.IsValid() {
			found = append(found, net.JoinHostPort(e.addr.String(), e.port))
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, timeout)
		addrs, err := p.lookup(lctx, e.host)
		cancel()
		if err != nil {
			err = fmt.Errorf("resolve peers %s: %w", e.host, err)
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			return err
		}
		for _, a := range addrs {
			// A dual-stack Service lists each replica twice, once per
			// family: keep the family of this replica's own address, so
			// that each replica is one peer and this one knows itself.
			if ip, err := netip.ParseAddr(a); err == nil && ip.Unmap().Is4() != p.self.Addr().Unmap().Is4() {
				continue
			}
			found = append(found, net.JoinHostPort(a, e.port))
		}
	}
	slices.Sort(found)
	found = slices.Compact(found)
	p.mu.Lock()
	p.current, p.err = found, nil
	p.mu.Unlock()
	return nil
}

// Run refreshes the set every interval until ctx ends.
func (p *Peers) Run(ctx context.Context, every, timeout time.Duration, failed func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := p.Refresh(ctx, timeout); err != nil && ctx.Err() == nil && failed != nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
