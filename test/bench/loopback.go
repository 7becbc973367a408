package bench

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
)

// listenLoopback listens on port at a random loopback address. Member URLs
// carry etcd's fixed client port, so every stand-in for a fleet of members
// needs an address of its own. 127.0.0.0/16 is left to the e2e harness,
// which hands out its Pod IPs there.
func listenLoopback(port uint16) (net.Listener, error) {
	var err error
	for range 32 {
		ip := netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(254)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
		var l net.Listener
		if l, err = net.Listen("tcp", netip.AddrPortFrom(ip, port).String()); err == nil {
			return l, nil
		}
	}
	return nil, err
}

// listenerIP is the address l listens on.
func listenerIP(l net.Listener) netip.Addr {
	return l.Addr().(*net.TCPAddr).AddrPort().Addr().Unmap()
}

// serveBlackhole accepts connections on l and never answers: an etcd that
// is unreachable in the worst way, where every call runs into its timeout
// instead of failing at once. stop closes l and every connection held.
func serveBlackhole(l net.Listener) (stop func()) {
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	return func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}
}
