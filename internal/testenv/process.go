package testenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// LogMarker begins the line Start writes into the log before a run's output,
// and the line written after its exit: splitting a log that restarts share
// on it separates the runs.
const LogMarker = "=== testenv: "

// ReapTimeout bounds the wait for a process to be reaped after SIGKILL,
// which only an unkillable (D-state) process can exceed.
const ReapTimeout = 10 * time.Second

// ProcessSpec describes one process to start.
type ProcessSpec struct {
	Name string   // for logs and errors [the base name of Path]
	Path string   // the binary
	Args []string // without argv[0]
	// Env is the complete environment: nothing is inherited, so that a
	// variable left in a developer's shell cannot reconfigure the child. A
	// caller that wants the test's own environment passes os.Environ(),
	// filtered as it sees fit.
	Env     []string
	Dir     string
	LogPath string // stdout and stderr are appended here
	// OnExit is called once, after the process has been reaped and Done
	// closed.
	OnExit func()
	Gid    uint32 // primary group, 0 to keep the test binary's
}

// Process is a started process. Its pid stays ours until Done is closed: the
// goroutine that waits for it is the only one that reaps it, and os.Process
// signals through a pidfd, so a recycled pid is never hit.
type Process struct {
	Name    string
	Pid     int
	Started time.Time
	LogPath string
	// LogOffset is where this run's part of LogPath begins (its LogMarker
	// line), so that a log that restarts share can be searched for the
	// errors of one run (ReadLogFrom).
	LogOffset int64

	cmd     *exec.Cmd
	done    chan struct{}
	state   *os.ProcessState // valid once done is closed
	waitErr error            // valid once done is closed
}

// Start launches a process; see ProcessSpec.
func Start(spec ProcessSpec) (*Process, error) {
	if spec.Name == "" {
		spec.Name = filepath.Base(spec.Path)
	}
	logf, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testenv: start %s: open log: %w", spec.Name, err)
	}
	off, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("testenv: start %s: seek log: %w", spec.Name, err)
	}
	// The command line goes into the log so that a failure can be
	// reproduced by hand from the log alone.
	if _, err := fmt.Fprintf(logf, "%s%s start %s: %s %s\n", LogMarker, time.Now().Format(time.RFC3339Nano),
		spec.Name, spec.Path, strings.Join(spec.Args, " ")); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("testenv: start %s: write log: %w", spec.Name, err)
	}
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	if cmd.Env == nil {
		cmd.Env = []string{} // nil would inherit the test's environment
	}
	cmd.Dir = spec.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if spec.Gid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(os.Getuid()), Gid: spec.Gid, NoSetGroups: true}
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("testenv: start %s: %w", spec.Name, err)
	}
	p := &Process{Name: spec.Name, Pid: cmd.Process.Pid, Started: time.Now(), LogPath: spec.LogPath, LogOffset: off,
		cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		p.state = cmd.ProcessState
		fmt.Fprintf(logf, "%s%s exit %s: %v\n", LogMarker, time.Now().Format(time.RFC3339Nano), spec.Name, cmd.ProcessState)
		_ = logf.Close()
		close(p.done)
		if spec.OnExit != nil {
			spec.OnExit()
		}
	}()
	return p, nil
}

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process is gone.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitErr is what waiting for the process returned (an *exec.ExitError
// for a non-zero exit), once Done is closed; nil before.
func (p *Process) WaitErr() error {
	if !p.Exited() {
		return nil
	}
	return p.waitErr
}

// ExitCode waits for the exit and follows the shell convention: 128+signal
// for a signalled process, which is also what the kubelet reports for a
// killed container.
func (p *Process) ExitCode() int {
	<-p.done
	if p.state == nil {
		return -1
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return p.state.ExitCode()
}

// Signaled waits for the exit and returns the signal that ended the
// process, or 0.
func (p *Process) Signaled() syscall.Signal {
	<-p.done
	if p.state == nil {
		return 0
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// Signal sends sig to the process (not its group) unless it has exited; an
// error then wraps os.ErrProcessDone.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("testenv: signal %s (pid %d): %w", p.Name, p.Pid, os.ErrProcessDone)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("testenv: signal %v to %s (pid %d): %w", sig, p.Name, p.Pid, err)
	}
	return nil
}

// Stop asks the process to end as a kubelet or an operator would: SIGTERM,
// and SIGKILL to its whole group when it has not exited after grace. A
// stopped (SIGSTOP) process gets SIGCONT after SIGTERM so that it can act
// on it, as the container runtime does. The wait after SIGKILL is bounded
// by ReapTimeout.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	_ = p.Signal(syscall.SIGCONT)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := p.Kill(); err != nil {
		return fmt.Errorf("testenv: %s (pid %d) ignored SIGTERM for %v: %w", p.Name, p.Pid, grace, err)
	}
	return nil
}

// Kill is kill -9 of the process and of everything it started in its
// process group, then a wait of at most ReapTimeout for the exit.
func (p *Process) Kill() error {
	if p.Exited() {
		return nil
	}
	// The group first, while its leader, not yet reaped, still holds its
	// id; then the leader through its pidfd, which also covers a system
	// without process groups of their own.
	groupErr := killGroup(p.Pid)
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return errors.Join(err, groupErr)
	}
	timer := time.NewTimer(ReapTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("testenv: %s (pid %d) not reaped %v after SIGKILL", p.Name, p.Pid, ReapTimeout)
	}
}
