package etcdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	// defaultStartTimeout covers a 3-member cluster on a loaded 2-core CI
	// machine (members are normally healthy in about a second).
	defaultStartTimeout = 20 * time.Second
	healthPollInterval  = 100 * time.Millisecond
	// healthRequestTimeout bounds one probe: a member without quorum holds
	// /health open for its own request timeout (seconds), and a fresh probe
	// notices recovery sooner than a long-hanging one.
	healthRequestTimeout = 2 * time.Second
)

// Member is one etcd process, started by StartCluster or StartMember. Its
// methods must be called from the test goroutine.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	// PID is the pid of the latest process started for this member; Stop
	// and Kill reset it to 0. A process that died on its own keeps its PID
	// until then: check Running.
	PID     int
	DataDir string
	// LogPath holds the process's stdout and stderr, across restarts.
	LogPath string
	// healthURL serves /health: the metrics URL of a member that serves
	// clients TLS, the client URL otherwise.
	healthURL string

	t            testing.TB
	binary       string
	args         []string
	env          []string
	startTimeout time.Duration
	proc         *process
	logOffset    int64
	tailShown    bool
}

func newMember(t testing.TB, binary, name, dir, clientURL, peerURL string, flags, extraArgs, env []string, timeout time.Duration) *Member {
	m := &Member{
		Name:         name,
		ClientURL:    clientURL,
		PeerURL:      peerURL,
		DataDir:      filepath.Join(dir, name+".etcd"),
		LogPath:      filepath.Join(dir, name+".log"),
		t:            t,
		binary:       binary,
		env:          env,
		startTimeout: timeout,
	}
	// --logger=zap because 3.4 defaults to capnslog; one format across
	// versions keeps log tails comparable. Extra args go last so that they
	// override these (etcd's flag parsing keeps the last value).
	m.args = append([]string{
		"--name=" + name,
		"--data-dir=" + m.DataDir,
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--logger=zap",
		"--log-outputs=stderr",
	}, flags...)
	m.args = append(m.args, extraArgs...)
	return m
}

// Running reports whether the member's process is alive (not yet reaped).
func (m *Member) Running() bool { return m.proc != nil && !m.proc.exited() }

// start launches the process without waiting for it to be ready.
func (m *Member) start() error {
	if m.Running() {
		return fmt.Errorf("etcdtest: member %s already running as pid %d", m.Name, m.PID)
	}
	p, off, err := startProcess(m.binary, m.args, m.env, m.LogPath)
	if err != nil {
		return fmt.Errorf("member %s: %w", m.Name, err)
	}
	m.proc, m.logOffset, m.PID = p, off, p.pid()
	return nil
}

// Start relaunches a stopped member with its original flags and data dir
// (etcd ignores the --initial-cluster* flags once the data dir exists) and
// does not wait: a member restarted into a cluster without quorum never gets
// healthy, and tests of quorum loss need to start several before waiting.
func (m *Member) Start() {
	m.t.Helper()
	if err := m.start(); err != nil {
		m.t.Fatal(err)
	}
}

// Stop sends SIGTERM, then SIGKILL after 5 s, and reaps the process.
func (m *Member) Stop() {
	m.t.Helper()
	if err := m.stop(); err != nil {
		m.t.Fatalf("member %s: %v", m.Name, err)
	}
}

func (m *Member) stop() error {
	if m.proc == nil {
		return nil
	}
	if err := m.proc.stop(); err != nil {
		return err
	}
	m.PID = 0
	return nil
}

// Kill sends SIGKILL and reaps the process: a crash, with no chance for etcd
// to flush, step down as leader, or tell its peers.
func (m *Member) Kill() {
	m.t.Helper()
	if m.proc == nil {
		return
	}
	if err := m.proc.kill(); err != nil {
		m.t.Fatalf("member %s: %v", m.Name, err)
	}
	m.PID = 0
}

// Restart stops the member if it is running, starts it again and waits until
// it reports healthy.
func (m *Member) Restart() {
	m.t.Helper()
	m.Stop()
	m.Start()
	m.WaitHealthy()
}

// WaitHealthy waits (bounded by the start timeout) for /health to report
// true, failing the test with the member's log tail otherwise.
func (m *Member) WaitHealthy() {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), m.startTimeout)
	defer cancel()
	if err := waitHealthy(ctx, []*Member{m}); err != nil {
		m.t.Fatalf("%v\n%s", err, showTails([]*Member{m}))
	}
}

// Health is one GET /health: the HTTP status, the body, and whether the body
// says healthy. Tests compare it across versions; it never fails the test.
func (m *Member) Health(ctx context.Context) (healthy bool, status int, body string, err error) {
	return checkHealth(ctx, m.healthBase()+"/health")
}

func (m *Member) healthBase() string {
	if m.healthURL != "" {
		return m.healthURL
	}
	return m.ClientURL
}

// Log returns the member's log so far (its end, if very long), for tests
// that assert on what etcd logged.
func (m *Member) Log() string {
	b, err := readLogFrom(m.LogPath, 0)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(b)
}

// bindFailed reports whether the current run died because a port we picked
// was taken in the meantime, the one start failure worth retrying.
func (m *Member) bindFailed() bool {
	if m.proc == nil || !m.proc.exited() {
		return false
	}
	b, err := readLogFrom(m.LogPath, m.logOffset)
	return err == nil && bytes.Contains(b, []byte("address already in use"))
}

var healthClient = &http.Client{
	Timeout: healthRequestTimeout,
	Transport: &http.Transport{
		// Never route loopback probes through a proxy from the environment,
		// and keep no idle connections to processes we are about to kill.
		Proxy:             nil,
		DisableKeepAlives: true,
	},
}

// healthBody is the /health JSON in 3.4 ({"health":"true"}) and 3.5+
// ({"health":"true","reason":""}); health is a string in every version.
type healthBody struct {
	Health string `json:"health"`
}

func checkHealth(ctx context.Context, rawURL string) (bool, int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return false, 0, "", fmt.Errorf("etcdtest: health request: %w", err)
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return false, 0, "", fmt.Errorf("etcdtest: GET %s: %w", rawURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return false, resp.StatusCode, "", fmt.Errorf("etcdtest: read %s: %w", rawURL, err)
	}
	var hb healthBody
	healthy := resp.StatusCode == http.StatusOK && json.Unmarshal(b, &hb) == nil && hb.Health == "true"
	return healthy, resp.StatusCode, string(b), nil
}

// waitHealthy polls every member's /health until all are healthy, one of
// them exits, or ctx ends. Members are polled concurrently because /health
// on a member without quorum blocks for the whole request timeout, which
// would otherwise delay noticing that its peers are ready. An early exit is
// reported at once: waiting out the timeout on a dead process only delays
// the real error.
func waitHealthy(ctx context.Context, members []*Member) error {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i    int
		last string
		err  error
	}
	results := make(chan result, len(members))
	for i, m := range members {
		go func() {
			last, err := m.pollHealthy(ctx)
			results <- result{i, last, err}
		}()
	}
	last := make([]string, len(members))
	var exitErr, ctxErr error
	for range members {
		r := <-results
		last[r.i] = r.last
		switch {
		case r.err == nil:
		case errors.Is(r.err, errExited):
			if exitErr == nil {
				exitErr = r.err
			}
			cancel()
		default:
			ctxErr = r.err
		}
	}
	if exitErr != nil {
		return exitErr
	}
	if ctxErr != nil {
		var b strings.Builder
		for i, m := range members {
			fmt.Fprintf(&b, "\n  %s (%s): %s", m.Name, m.ClientURL, last[i])
		}
		return fmt.Errorf("etcdtest: members not healthy after %v:%s: %w",
			time.Since(start).Round(time.Millisecond), b.String(), ctxErr)
	}
	return nil
}

var errExited = errors.New("exited before becoming healthy")

// pollHealthy returns the last observation ("healthy", an error, or a
// status and body) so a timeout can say what each member was doing.
func (m *Member) pollHealthy(ctx context.Context) (string, error) {
	ticker := time.NewTicker(healthPollInterval)
	defer ticker.Stop()
	last := "not polled yet"
	for {
		if m.proc == nil || m.proc.exited() {
			var waitErr error
			if m.proc != nil {
				waitErr = m.proc.waitErr
			}
			return last, fmt.Errorf("etcdtest: member %s %w: %w", m.Name, errExited, exitError(waitErr))
		}
		healthy, status, body, err := checkHealth(ctx, m.healthBase()+"/health")
		switch {
		case healthy:
			return "healthy", nil
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("HTTP %d %s", status, strings.TrimSpace(body))
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-ticker.C:
		}
	}
}

func exitError(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}

// showTails formats the log tails of members whose logs the test has not
// shown yet, and marks them shown so cleanup does not repeat them.
func showTails(members []*Member) string {
	var b strings.Builder
	for _, m := range members {
		if m.tailShown {
			continue
		}
		m.tailShown = true
		fmt.Fprintf(&b, "--- etcd member %s log tail (%s):\n%s\n", m.Name, m.LogPath, logTail(m.LogPath))
	}
	return b.String()
}

// MemberOptions configures StartMember.
type MemberOptions struct {
	// Name must match the name given to this member in InitialCluster.
	Name string
	// InitialCluster is the --initial-cluster value: every current member
	// plus this one, as name=peerURL pairs (see Cluster.InitialClusterWith).
	InitialCluster string
	// PeerURL defaults to this member's entry in InitialCluster, which is
	// normally the URL already given to MemberAdd/MemberAddAsLearner.
	PeerURL string
	// ClientURL defaults to a free loopback port.
	ClientURL string
	// Version defaults to DefaultVersion; Binary, if set, is used instead.
	Version string
	Binary  string
	// ExtraArgs are appended after the generated flags and so override them.
	ExtraArgs []string
	// Env is added to the process environment (ETCD_* from the test's own
	// environment is removed, these are not).
	Env []string
	// StartTimeout bounds the wait for /health; default 20 s.
	StartTimeout time.Duration
	// NoWait returns as soon as the process is started, for members that
	// are not expected to become healthy (no quorum, or a start meant to fail).
	NoWait bool
}

// maxStartAttempts bounds retries after a picked port was taken by someone
// else between the probe and etcd's bind.
const maxStartAttempts = 3

// StartMember starts one etcd process that joins an existing cluster
// (--initial-cluster-state=existing). The member must already have been
// added through the cluster API (MemberAdd or MemberAddAsLearner); etcd
// exits at start otherwise. Cleanup stops it when the test ends.
func StartMember(t testing.TB, opts MemberOptions) *Member {
	t.Helper()
	if opts.Name == "" {
		t.Fatal("etcdtest: MemberOptions.Name is required")
	}
	if opts.InitialCluster == "" {
		t.Fatal("etcdtest: MemberOptions.InitialCluster is required")
	}
	peerURL := opts.PeerURL
	if peerURL == "" {
		peerURL = peerURLOf(opts.InitialCluster, opts.Name)
		if peerURL == "" {
			t.Fatalf("etcdtest: member %q is not in initial cluster %q and no PeerURL was given", opts.Name, opts.InitialCluster)
		}
	}
	if err := checkLoopback(peerURL); err != nil {
		t.Fatal(err)
	}
	if opts.ClientURL != "" {
		if err := checkLoopback(opts.ClientURL); err != nil {
			t.Fatal(err)
		}
	}
	bin := opts.Binary
	if bin == "" {
		bin = BinaryPath(t, versionOrDefault(opts.Version))
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = defaultStartTimeout
	}
	root := t.TempDir()

	var members []*Member
	t.Cleanup(func() { cleanupMembers(t, members) })

	flags := []string{
		"--initial-cluster=" + opts.InitialCluster,
		"--initial-cluster-state=existing",
	}
	for attempt := 1; attempt <= maxStartAttempts; attempt++ {
		clientURL := opts.ClientURL
		if clientURL == "" {
			u, err := freeURL()
			if err != nil {
				t.Fatal(err)
			}
			clientURL = u
		}
		dir := filepath.Join(root, fmt.Sprintf("attempt-%d", attempt))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
		m := newMember(t, bin, opts.Name, dir, clientURL, peerURL, flags, opts.ExtraArgs, opts.Env, timeout)
		members = append(members, m)
		if err := m.start(); err != nil {
			t.Fatal(err)
		}
		if opts.NoWait {
			return m
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := waitHealthy(ctx, []*Member{m})
		cancel()
		if err == nil {
			return m
		}
		// Only the client port is ours to change: the peer URL is already
		// registered in the cluster.
		if !m.bindFailed() || opts.ClientURL != "" || attempt == maxStartAttempts {
			t.Fatalf("%v\n%s", err, showTails([]*Member{m}))
		}
		t.Logf("etcdtest: member %s lost a port race, retrying: %v", m.Name, err)
	}
	panic("unreachable")
}

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

func versionOrDefault(v string) string {
	if v == "" {
		return DefaultVersion
	}
	return v
}
