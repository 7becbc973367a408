package testenv

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// Loopback is the only address a test process binds or dials: nothing a
// test starts may be reachable from, or talk to, another machine.
const Loopback = "127.0.0.1"

// handedOut remembers every port given out in this test binary. The kernel
// may hand the same just-closed port to two callers in a row; remembering
// them removes that collision between the processes of one test binary,
// leaving only the race with other processes (which callers retry).
var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// maxPortTries bounds the search; hitting it means the loopback port space
// is exhausted or something is badly wrong, not bad luck.
const maxPortTries = 100

// FreePort returns a TCP port on Loopback that was free a moment ago and
// that this test binary has not handed out before.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var lastErr error
	for range maxPortTries {
		l, err := net.Listen("tcp", net.JoinHostPort(Loopback, "0"))
		if err != nil {
			lastErr = err
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("testenv: close probe listener: %w", err)
		}
		if handedOut[port] {
			continue
		}
		handedOut[port] = true
		return port, nil
	}
	if lastErr == nil {
		return 0, fmt.Errorf("testenv: no unused loopback port after %d tries", maxPortTries)
	}
	return 0, fmt.Errorf("testenv: no free loopback port after %d tries: %w", maxPortTries, lastErr)
}

// CountingListener counts the connections it accepts: each is a dial by
// the client under test.
type CountingListener struct {
	net.Listener
	Accepted *atomic.Int64
}

// Accept implements net.Listener.
func (l CountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.Accepted.Add(1)
	}
	return c, err
}
