package etcdtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

const (
	// stopGrace is how long etcd gets to shut down cleanly on SIGTERM; a
	// healthy member needs well under a second, so hitting it is worth a
	// SIGKILL rather than a hung test.
	stopGrace = 5 * time.Second
	// reapTimeout bounds the wait after SIGKILL, which only an unkillable
	// (D-state) process could exceed.
	reapTimeout = 10 * time.Second
	// logTailLines is how much of a member's log a failing test shows:
	// enough for the fatal error and what led to it, not a wall of startup.
	logTailLines = 40
	// logTailBytes caps how much of a log file is read to find that tail.
	logTailBytes = 64 << 10
)

// process is one run of an etcd binary. The waiter goroutine is the only
// caller of Wait, so the pid stays ours (not reused) until done is closed.
type process struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error // valid once done is closed
}

// startProcess appends the child's stdout and stderr to logPath and returns
// the log offset at which this run's output begins, so that a restarted
// member's log can be searched for this run's errors only.
func startProcess(bin string, args, extraEnv []string, logPath string) (*process, int64, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("etcdtest: open member log: %w", err)
	}
	off, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("etcdtest: seek member log: %w", err)
	}
	// The command line goes into the log so a failure can be reproduced by
	// hand from the log alone.
	if _, err := fmt.Fprintf(f, "=== etcdtest %s: %s %s\n",
		time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " ")); err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("etcdtest: write member log: %w", err)
	}

	cmd := exec.Command(bin, args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(childEnv(os.Environ()), extraEnv...)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("etcdtest: start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, off, nil
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

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks etcd to shut down cleanly, as a real operator or kubelet would,
// and escalates to SIGKILL after stopGrace.
func (p *process) stop() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("etcdtest: SIGTERM pid %d: %w", p.pid(), err)
	}
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := p.kill(); err != nil {
		return fmt.Errorf("etcdtest: pid %d ignored SIGTERM for %v: %w", p.pid(), stopGrace, err)
	}
	return nil
}

func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("etcdtest: SIGKILL pid %d: %w", p.pid(), err)
	}
	timer := time.NewTimer(reapTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("etcdtest: pid %d not reaped %v after SIGKILL", p.pid(), reapTimeout)
	}
}

// readLogFrom returns the log from offset on (at most logTailBytes of its
// end), which is enough to look for one run's fatal error.
func readLogFrom(path string, offset int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: open member log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("etcdtest: stat member log: %w", err)
	}
	if start := fi.Size() - logTailBytes; start > offset {
		offset = start
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("etcdtest: seek member log: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, logTailBytes))
	if err != nil {
		return nil, fmt.Errorf("etcdtest: read member log: %w", err)
	}
	return b, nil
}

// logTail returns the last logTailLines lines of a member log, or a note
// saying why it could not, so failure output never hides the original error.
func logTail(path string) string {
	b, err := readLogFrom(path, 0)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
