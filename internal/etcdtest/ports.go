package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// loopbackHost is the only address anything here binds or dials: test
// clusters must never be reachable from, or talk to, another machine.
const loopbackHost = testenv.Loopback

func loopbackURL(port int) string {
	return "http://" + net.JoinHostPort(loopbackHost, strconv.Itoa(port))
}

func freeURL() (string, error) {
	p, err := testenv.FreePort()
	if err != nil {
		return "", fmt.Errorf("etcdtest: %w", err)
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

// peerURLOf finds name's first peer URL in an --initial-cluster value.
func peerURLOf(initialCluster, name string) string {
	for _, kv := range strings.Split(initialCluster, ",") {
		n, u, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && n == name {
			return u
		}
	}
	return ""
}

// checkLoopback refuses caller-supplied URLs that would make etcd listen
// beyond this machine.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("etcdtest: parse URL %q: %w", raw, err)
	}
	if u.Hostname() != loopbackHost {
		return fmt.Errorf("etcdtest: URL %q must use host %s", raw, loopbackHost)
	}
	return nil
}
