package etcdtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
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
	// stopGrace is how long etcd gets to shut down cleanly on SIGTERM; a
	// healthy member needs well under a second, so hitting it is worth a
	// SIGKILL rather than a hung test.
	stopGrace = 5 * time.Second
	// logTailLines is how much of a member's log a failing test shows:
	// enough for the fatal error and what led to it, not a wall of startup.
	logTailLines = 40
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
	proc         *testenv.Process
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
func (m *Member) Running() bool { return m.proc != nil && !m.proc.Exited() }

// start launches the process without waiting for it to be ready.
func (m *Member) start() error {
	if m.Running() {
		return fmt.Errorf("etcdtest: member %s already running as pid %d", m.Name, m.PID)
	}
	p, err := testenv.Start(testenv.ProcessSpec{
		Name:    "etcd member " + m.Name,
		Path:    m.binary,
		Args:    m.args,
		Env:     append(childEnv(os.Environ()), m.env...),
		LogPath: m.LogPath,
	})
	if err != nil {
		return fmt.Errorf("etcdtest: member %s: %w", m.Name, err)
	}
	m.proc, m.logOffset, m.PID = p, p.LogOffset, p.Pid
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
	if err := m.proc.Stop(stopGrace); err != nil {
		return fmt.Errorf("etcdtest: member %s: %w", m.Name, err)
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
	if err := m.proc.Kill(); err != nil {
		m.t.Fatalf("etcdtest: member %s: %v", m.Name, err)
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
	b, err := testenv.ReadLogFrom(m.LogPath, 0)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(b)
}

// bindFailed reports whether the current run died because a port we picked
// was taken in the meantime, the one start failure worth retrying.
func (m *Member) bindFailed() bool {
	if m.proc == nil || !m.proc.Exited() {
		return false
	}
	b, err := testenv.ReadLogFrom(m.LogPath, m.logOffset)
	return err == nil && bytes.Contains(b, []byte("address already in use"))
}

// childEnv drops ETCD_* variables: etcd reads every flag from them too, and
// one left over in a developer's shell would either silently reconfigure the
// test member or (3.5+) make etcd refuse to start over the conflict.
func childEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, "ETCD_") {
			continue
		}
		out = append(out, kv)
	}
	return out
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

// logTail returns the last logTailLines lines of a member log, or a note
// saying why it could not, so failure output never hides the original error.
func logTail(path string) string {
	s, err := testenv.TailFile(path, logTailLines)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return s
}
