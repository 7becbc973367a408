package harness

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSServer is the cluster DNS: an authoritative server for A records, and
// PTR records of <d>.<c>.<b>.<a>.in-addr.arpa, that come from live sources
// (the pod table of each test's APIServer). It answers NXDOMAIN for names no
// source knows and an empty answer (NODATA) for other record types of known
// names, so that Go's resolver, which asks A and AAAA in parallel, gets a
// clean IPv4-only answer.
//
// Go's resolver does not cache, so a Pod is resolvable the moment it has an IP
// and stops being so when it is gone; that is why the harness serves DNS
// instead of rewriting a hosts file (Go caches /etc/hosts for 5 s).
type DNSServer struct {
	addr    netip.AddrPort
	udp     net.PacketConn
	tcp     net.Listener
	mu      sync.Mutex
	sources map[int]func(name string) []netip.Addr
	// ptrSources answer reverse lookups, by address.
	ptrSources map[int]func(ip netip.Addr) []string
	nextID     int
	wg         sync.WaitGroup
	closed     atomic.Bool
	Queries    atomic.Int64
}

// StartDNS listens on addr over UDP and TCP. A port of 0 picks a free one.
func StartDNS(addr string) (*DNSServer, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dns address %q: %w", addr, err)
	}
	const attempts = 20
	var lastErr error
	for range attempts {
		udp, err := net.ListenPacket("udp", ap.String())
		if err != nil {
			return nil, fmt.Errorf("dns listen udp %s: %w", ap, err)
		}
		bound := udp.LocalAddr().(*net.UDPAddr).AddrPort()
		bound = netip.AddrPortFrom(bound.Addr().Unmap(), bound.Port())
		tcp, err := net.Listen("tcp", bound.String())
		if err != nil {
			udp.Close()
			lastErr = err
			if ap.Port() != 0 {
				break
			}
			continue // the ephemeral UDP port was taken over TCP; try another
		}
		d := &DNSServer{addr: bound, udp: udp, tcp: tcp, sources: map[int]func(string) []netip.Addr{},
			ptrSources: map[int]func(netip.Addr) []string{}}
		d.wg.Add(2)
		go d.serveUDP()
		go d.serveTCP()
		return d, nil
	}
	return nil, fmt.Errorf("dns listen tcp %s: %w", ap, lastErr)
}

// Addr is where the server listens.
func (d *DNSServer) Addr() netip.AddrPort { return d.addr }

// AddSource registers a lookup function; the returned func removes it.
// Lookups get lowercase names without the trailing dot.
func (d *DNSServer) AddSource(fn func(name string) []netip.Addr) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.nextID
	d.nextID++
	d.sources[id] = fn
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.sources, id)
	}
}

// AddPTRSource registers a reverse lookup function, asked for the address of
// every in-addr.arpa query; it returns names without the trailing dot. The
// returned func removes it.
func (d *DNSServer) AddPTRSource(fn func(ip netip.Addr) []string) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.nextID
	d.nextID++
	d.ptrSources[id] = fn
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.ptrSources, id)
	}
}

// Close stops serving and waits for the serving goroutines.
func (d *DNSServer) Close() error {
	d.closed.Store(true)
	err := errors.Join(d.udp.Close(), d.tcp.Close())
	d.wg.Wait()
	return err
}

func (d *DNSServer) lookup(name string) []netip.Addr {
	d.mu.Lock()
	srcs := make([]func(string) []netip.Addr, 0, len(d.sources))
	for _, id := range sortedIntKeys(d.sources) {
		srcs = append(srcs, d.sources[id])
	}
	d.mu.Unlock()
	var out []netip.Addr
	for _, fn := range srcs {
		out = append(out, fn(name)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// reverse collects the names of ip from every PTR source, sorted, without
// duplicates.
func (d *DNSServer) reverse(ip netip.Addr) []string {
	d.mu.Lock()
	srcs := make([]func(netip.Addr) []string, 0, len(d.ptrSources))
	for _, id := range sortedIntKeys(d.ptrSources) {
		srcs = append(srcs, d.ptrSources[id])
	}
	d.mu.Unlock()
	var out []string
	for _, fn := range srcs {
		out = append(out, fn(ip)...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// reverseAddr parses an IPv4 reverse name, d.c.b.a.in-addr.arpa (lowercase,
// without the trailing dot). IPv6 reverse names are not: no Pod has an IPv6
// address.
func reverseAddr(name string) (netip.Addr, bool) {
	rest, ok := strings.CutSuffix(name, ".in-addr.arpa")
	if !ok {
		return netip.Addr{}, false
	}
	labels := strings.Split(rest, ".")
	if len(labels) != 4 {
		return netip.Addr{}, false
	}
	slices.Reverse(labels)
	ip, err := netip.ParseAddr(strings.Join(labels, "."))
	if err != nil || !ip.Is4() {
		return netip.Addr{}, false
	}
	return ip, true
}

func (d *DNSServer) serveUDP() {
	defer d.wg.Done()
	buf := make([]byte, 4096)
	for !d.closed.Load() {
		n, from, err := d.udp.ReadFrom(buf)
		if err != nil {
			if d.closed.Load() {
				return
			}
			continue
		}
		resp := d.answer(buf[:n], 512)
		if resp != nil {
			_, _ = d.udp.WriteTo(resp, from)
		}
	}
}

func (d *DNSServer) serveTCP() {
	defer d.wg.Done()
	for !d.closed.Load() {
		c, err := d.tcp.Accept()
		if err != nil {
			if d.closed.Load() {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer c.Close()
			// Bounded: one connection serves a few queries within a deadline.
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			for range 64 {
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				resp := d.answer(msg, 65535)
				if resp == nil {
					return
				}
				out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
				if _, err := c.Write(append(out, resp...)); err != nil {
					return
				}
			}
		}()
	}
}

// answer builds the response to one query, or nil for garbage.
func (d *DNSServer) answer(req []byte, limit int) []byte {
	d.Queries.Add(1)
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil
	}
	rh := dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, Authoritative: true,
		RecursionDesired: h.RecursionDesired,
		// Set so that Go's resolver does not take an empty answer for a
		// lame referral.
		RecursionAvailable: true,
	}
	q, err := p.Question()
	if err != nil || h.OpCode != 0 {
		rh.RCode = dnsmessage.RCodeFormatError
		if h.OpCode != 0 {
			rh.RCode = dnsmessage.RCodeNotImplemented
		}
		b := dnsmessage.NewBuilder(nil, rh)
		msg, _ := b.Finish()
		return msg
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	var ips []netip.Addr
	var ptrs []string
	if q.Class == dnsmessage.ClassINET {
		if ip, ok := reverseAddr(name); ok {
			ptrs = d.reverse(ip)
		} else {
			ips = d.lookup(name)
		}
	}
	if len(ips) == 0 && len(ptrs) == 0 {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	if err := b.Question(q); err != nil {
		return nil
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	if q.Type == dnsmessage.TypeA {
		// Each A record costs 16 bytes with a compressed name; stay within
		// the transport's limit rather than set TC, the lists are short.
		room := (limit - 12 - len(q.Name.String()) - 6) / 16
		for i, ip := range ips {
			if i >= room {
				break
			}
			err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5},
				dnsmessage.AResource{A: ip.As4()})
			if err != nil {
				return nil
			}
		}
	}
	if q.Type == dnsmessage.TypePTR {
		// A PTR record costs its name plus 12 bytes with a compressed
		// owner name; as for A, stay within the limit.
		room := limit - 12 - len(q.Name.String()) - 6
		for _, p := range ptrs {
			n, err := dnsmessage.NewName(p + ".")
			if err != nil {
				continue
			}
			if room -= 12 + len(p) + 2; room < 0 {
				break
			}
			err = b.PTRResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5},
				dnsmessage.PTRResource{PTR: n})
			if err != nil {
				return nil
			}
		}
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

// clusterDNS resolves the Kubernetes service-discovery names of one APIServer:
//
//	<hostname>.<subdomain>.<namespace>.svc[.cluster.local] -> the Pod's IP
//	<service>.<namespace>.svc[.cluster.local]               -> IPs of its endpoints
//
// In strict mode a Pod name resolves only as Kubernetes does it: a headless
// Service named like the subdomain must select the Pod, and the Pod must be
// ready unless that Service publishes not-ready addresses. Otherwise every Pod
// with an IP resolves. A ClusterIP Service resolves to its ready endpoints'
// IPs: the harness has no virtual IPs (there is no kube-proxy, and an address
// outside 127/8 must never be dialled).
func clusterDNS(api *APIServer, strict bool) func(string) []netip.Addr {
	return func(name string) []netip.Addr {
		name = strings.TrimSuffix(name, ".cluster.local")
		rest, ok := strings.CutSuffix(name, ".svc")
		if !ok {
			return nil
		}
		labels := strings.Split(rest, ".")
		switch len(labels) {
		case 2:
			return serviceIPs(api, labels[1], labels[0])
		case 3:
			return podIPsByHostname(api, labels[2], labels[1], labels[0], strict)
		}
		return nil
	}
}

func endpointIncluded(pod Object, svc Object) bool {
	if pub, _ := nested(svc, "spec", "publishNotReadyAddresses"); pub == true {
		return true
	}
	return podReady(pod) && !isTerminating(pod)
}

func serviceIPs(api *APIServer, namespace, name string) []netip.Addr {
	var out []netip.Addr
	for _, ep := range ServiceEndpoints(api, namespace, name) {
		out = append(out, ep.IP)
	}
	return out
}

// Endpoint is one address a Service sends connections to, and the Pod
// behind it.
type Endpoint struct {
	Pod string
	IP  netip.Addr
}

// ServiceEndpoints are a Service's endpoints as kube-proxy would pick
// them (the harness has no EndpointSlices): the Pods its selector matches
// that have an IP and are Ready and not terminating, or that merely have
// an IP if it publishes not-ready addresses; sorted by Pod name. The
// cluster DNS answers <service>.<namespace>.svc with these, and a test
// that judges where clients are sent must read the same.
func ServiceEndpoints(api *APIServer, namespace, name string) []Endpoint {
	svc, ok := api.Get(Ref{Type: TypeService, Namespace: namespace, Name: name})
	if !ok {
		return nil
	}
	sel, _ := nested(svc, "spec", "selector")
	var out []Endpoint
	for _, pod := range api.List(TypePod, namespace) {
		if !matchServiceSelector(sel, podLabels(pod)) || !endpointIncluded(pod, svc) {
			continue
		}
		if ip, err := netip.ParseAddr(nestedString(pod, "status", "podIP")); err == nil {
			out = append(out, Endpoint{Pod: nestedString(pod, "metadata", "name"), IP: ip})
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return strings.Compare(a.Pod, b.Pod) })
	return out
}

func podIPsByHostname(api *APIServer, namespace, subdomain, hostname string, strict bool) []netip.Addr {
	var svc Object
	if strict {
		s, ok := api.Get(Ref{Type: TypeService, Namespace: namespace, Name: subdomain})
		if !ok || nestedString(s, "spec", "clusterIP") != "None" {
			return nil
		}
		svc = s
	}
	var out []netip.Addr
	for _, pod := range api.List(TypePod, namespace) {
		if strings.ToLower(nestedString(pod, "spec", "hostname")) != hostname ||
			strings.ToLower(nestedString(pod, "spec", "subdomain")) != subdomain {
			continue
		}
		if svc != nil {
			sel, _ := nested(svc, "spec", "selector")
			if !matchServiceSelector(sel, podLabels(pod)) || !endpointIncluded(pod, svc) {
				continue
			}
		}
		if ip, err := netip.ParseAddr(nestedString(pod, "status", "podIP")); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

// clusterPTR answers reverse lookups of Pod IPs as CoreDNS does:
// <hostname>.<subdomain>.<namespace>.svc.cluster.local for a Pod with a
// hostname and a subdomain whose name clusterDNS resolves to that IP, in the
// same mode (strict: a selecting headless Service named like the subdomain,
// and readiness unless it publishes not-ready addresses). CoreDNS answers only
// the cluster-domain form, never <...>.svc, which is why a certificate whose
// wildcard SAN etcd matches by suffix against this name (--peer-client-cert-auth
// with DNS SANs) needs the *.<subdomain>.<namespace>.svc.cluster.local form.
// Other addresses, Services' included (the harness has no virtual IPs), get
// no name.
func clusterPTR(api *APIServer, strict bool) func(netip.Addr) []string {
	return func(ip netip.Addr) []string {
		var out []string
		for _, pod := range api.List(TypePod, "") {
			podIP, err := netip.ParseAddr(nestedString(pod, "status", "podIP"))
			if err != nil || podIP != ip {
				continue
			}
			hostname := strings.ToLower(nestedString(pod, "spec", "hostname"))
			subdomain := strings.ToLower(nestedString(pod, "spec", "subdomain"))
			namespace := nestedString(pod, "metadata", "namespace")
			if hostname == "" || subdomain == "" {
				continue
			}
			if slices.Contains(podIPsByHostname(api, namespace, subdomain, hostname, strict), ip) {
				out = append(out, hostname+"."+subdomain+"."+namespace+".svc.cluster.local")
			}
		}
		return out
	}
}
