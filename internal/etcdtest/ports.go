package etcdtest

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
)

// loopbackHost is the only address anything here binds or dials: test
// clusters must never be reachable from, or talk to, another machine.
const loopbackHost = "127.0.0.1"

// handedOut remembers every port given out in this process. The kernel may
// hand the same just-closed port to two callers in a row; remembering them
// removes that collision between clusters of one test binary, leaving only
// the (retried) race with other processes.
var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{}
)

// maxPortTries bounds the search; hitting it means the loopback port space
// is exhausted or something is badly wrong, not bad luck.
const maxPortTries = 100

func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var lastErr error
	for range maxPortTries {
		l, err := net.Listen("tcp", net.JoinHostPort(loopbackHost, "0"))
		if err != nil {
			lastErr = err
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("etcdtest: close probe listener: %w", err)
		}
		if handedOut[port] {
			continue
		}
		handedOut[port] = true
		return port, nil
	}
	if lastErr == nil {
		return 0, fmt.Errorf("etcdtest: no unused loopback port after %d tries", maxPortTries)
	}
	return 0, fmt.Errorf("etcdtest: no free loopback port after %d tries: %w", maxPortTries, lastErr)
}

func loopbackURL(port int) string {
	return "http://" + net.JoinHostPort(loopbackHost, strconv.Itoa(port))
}

func freeURL() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return loopbackURL(p), nil
}

// FreeURL returns an http://127.0.0.1:<port> URL on a port that was free a
// moment ago. Tests need a peer URL before the process exists, to pass to
// MemberAdd/MemberAddAsLearner, and then hand the same URL to StartMember.
func FreeURL(t testing.TB) string {
	t.Helper()
	u, err := freeURL()
	if err != nil {
		t.Fatal(err)
	}
	return u
}
