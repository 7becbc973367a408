package harness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
)

// IPAllocator hands out pod IPs from 127.0.1.1 to 127.0.254.254. All of
// 127.0.0.0/8 is routed to lo on Linux, so any of them can be bound without
// configuring anything. 127.0.0.x stays out, it holds 127.0.0.1.
//
// Addresses are never reused within a process: a later Pod must not inherit
// TIME_WAIT sockets or a client's idea of who lived there. The start is random
// so that two test binaries running at once (go test ./... runs packages in
// parallel) rarely meet, and an address whose etcd ports are taken is skipped.
type IPAllocator struct {
	mu   sync.Mutex
	next int // index in [0, 254*254)
	left int
	used map[netip.Addr]bool
}

const ipSpace = 254 * 254

// NewIPAllocator returns an allocator starting at a random address.
func NewIPAllocator() *IPAllocator {
	return &IPAllocator{next: rand.IntN(ipSpace), left: ipSpace, used: map[netip.Addr]bool{}}
}

// Allocate returns a fresh pod IP.
func (a *IPAllocator) Allocate() (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.left > 0 {
		i := a.next
		a.next = (a.next + 1) % ipSpace
		a.left--
		ip := netip.AddrFrom4([4]byte{127, 0, byte(1 + i/254), byte(1 + i%254)})
		if a.used[ip] || !portsFree(ip, 2379, 2380) {
			continue
		}
		a.used[ip] = true
		return ip, nil
	}
	return netip.Addr{}, errors.New("pod IP space 127.0.1.1-127.0.254.254 exhausted")
}

func portsFree(ip netip.Addr, ports ...uint16) bool {
	for _, p := range ports {
		l, err := net.Listen("tcp", netip.AddrPortFrom(ip, p).String())
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
