package etcdtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// cleanupMembers stops every member and shows logs if the test failed.
//
// Followers go first, in parallel, and the leader only once it has noticed
// they are gone. A leader that gets SIGTERM hands leadership to a connected
// follower and waits for the handover (up to 7 s with default timeouts): to
// a live follower that takes milliseconds, to one that is exiting at the
// same moment it never completes, and every multi-member test would pay the
// full 5 s SIGKILL grace. With no connected peer the leader skips the
// handover and exits at once.
func cleanupMembers(t testing.TB, members []*Member) {
	t.Helper()
	if t.Failed() {
		if s := showTails(members); s != "" {
			t.Log(s)
		}
	}
	var leaders, followers []*Member
	for _, m := range members {
		if !m.Running() {
			continue
		}
		if st, err := scrapeMetrics(m); err == nil && st.leader {
			leaders = append(leaders, m)
		} else {
			followers = append(followers, m)
		}
	}
	errs := stopAll(followers)
	if len(followers) > 0 {
		for _, l := range leaders {
			waitNoActivePeers(l)
		}
	}
	errs = append(errs, stopAll(leaders)...)
	for _, err := range errs {
		t.Errorf("etcdtest cleanup: %v", err)
	}
}

// stopAll stops members in parallel so that N members cost one shutdown
// time, not N.
func stopAll(members []*Member) []error {
	errs := make(chan error, len(members))
	for _, m := range members {
		go func() { errs <- m.stop() }()
	}
	var out []error
	for range members {
		if err := <-errs; err != nil {
			out = append(out, err)
		}
	}
	return out
}

// peerQuietTimeout bounds waitNoActivePeers. Peers outside this cleanup's
// members (say, a member a test started by other means and left running)
// keep the count up; then the wait just costs this much and the leader is
// stopped anyway.
const peerQuietTimeout = 2 * time.Second

// waitNoActivePeers waits until the member's rafthttp layer counts no active
// peer, which is what its leadership handover looks at on SIGTERM.
func waitNoActivePeers(m *Member) {
	deadline := time.Now().Add(peerQuietTimeout)
	for time.Now().Before(deadline) {
		st, err := scrapeMetrics(m)
		if err != nil || st.activePeers == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type memberMetrics struct {
	leader      bool
	activePeers int
}

// scrapeMetrics reads etcd_server_is_leader and etcd_network_active_peers
// from /metrics, which every supported version serves on the client URL,
// so leadership is known without a client library of the member's version.
func scrapeMetrics(m *Member) (memberMetrics, error) {
	var st memberMetrics
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.healthBase()+"/metrics", nil)
	if err != nil {
		return st, fmt.Errorf("etcdtest: metrics request: %w", err)
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("etcdtest: GET %s/metrics: %w", m.ClientURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("etcdtest: GET %s/metrics: HTTP %d", m.ClientURL, resp.StatusCode)
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch {
		case name == "etcd_server_is_leader":
			st.leader = strings.TrimSpace(value) == "1"
		case strings.HasPrefix(name, "etcd_network_active_peers{"):
			if strings.TrimSpace(value) != "0" {
				st.activePeers++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("etcdtest: read %s/metrics: %w", m.ClientURL, err)
	}
	return st, nil
}
