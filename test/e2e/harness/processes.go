package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcSpec describes one process to start.
type ProcSpec struct {
	Name    string   // for logs and errors
	Path    string   // binary
	Args    []string // without argv[0]
	Env     []string // the complete environment: nothing is inherited
	Dir     string
	LogPath string // stdout and stderr are appended here
	OnExit  func() // called once, after the process has been reaped
	Gid     uint32 // primary group, 0 to keep the harness' own
}

// Proc is a started process. Its pid stays valid for signalling until Done is
// closed: os.Process signals through a pidfd, so a recycled pid is never hit.
type Proc struct {
	Name    string
	Pid     int
	Started time.Time

	cmd   *exec.Cmd
	done  chan struct{}
	state *os.ProcessState
	err   error
}

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process is gone.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode follows the shell convention: 128+signal for a signalled process,
// which is also what the kubelet reports for a killed container.
func (p *Proc) ExitCode() int {
	<-p.done
	if p.state == nil {
		return -1
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return p.state.ExitCode()
}

// Signaled returns the signal that ended the process, or 0.
func (p *Proc) Signaled() syscall.Signal {
	<-p.done
	if p.state == nil {
		return 0
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// Signal sends sig unless the process has already exited.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("signal %s (pid %d): %w", p.Name, p.Pid, os.ErrProcessDone)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s (pid %d): %w", sig, p.Name, p.Pid, err)
	}
	return nil
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for the exit.
// A stopped (SIGSTOP) process is continued after SIGTERM so that it can act on
// it, as the container runtime does.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	_ = p.Signal(syscall.SIGCONT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Kill is kill -9: SIGKILL, then wait for the exit.
func (p *Proc) Kill() {
	if p.Exited() {
		return
	}
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// ProcTable tracks every process the harness starts, so that none survives a
// test, whatever happens.
type ProcTable struct {
	mu     sync.Mutex
	procs  map[int]*Proc
	closed bool
}

// NewProcTable returns an empty table.
func NewProcTable() *ProcTable { return &ProcTable{procs: map[int]*Proc{}} }

// Start launches a process and tracks it until it exits.
func (t *ProcTable) Start(spec ProcSpec) (*Proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("start %s: process table closed", spec.Name)
	}
	logf, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", spec.Name, err)
	}
	fmt.Fprintf(logf, "=== harness: %s start %s %s %s\n", time.Now().Format(time.RFC3339Nano), spec.Name, spec.Path, strings.Join(spec.Args, " "))
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Dir = spec.Dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a ^C at the terminal reaches the test binary,
		// which then stops its children in order, instead of all at once.
		Setpgid: true,
		// Safety net when the test binary dies without running cleanups
		// (go test's timeout panic, SIGKILL): the kernel kills the child.
		Pdeathsig: syscall.SIGKILL,
	}
	if spec.Gid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(os.Getuid()), Gid: spec.Gid, NoSetGroups: true}
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p := &Proc{Name: spec.Name, Pid: cmd.Process.Pid, Started: time.Now(), cmd: cmd, done: make(chan struct{})}
	t.procs[p.Pid] = p
	go func() {
		err := cmd.Wait()
		p.state = cmd.ProcessState
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.err = err
		}
		fmt.Fprintf(logf, "=== harness: %s exit %s: %v\n", time.Now().Format(time.RFC3339Nano), spec.Name, cmd.ProcessState)
		logf.Close()
		t.mu.Lock()
		delete(t.procs, p.Pid)
		t.mu.Unlock()
		close(p.done)
		if spec.OnExit != nil {
			spec.OnExit()
		}
	}()
	return p, nil
}

// Live returns the processes that have not exited yet, by pid.
func (t *ProcTable) Live() []*Proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*Proc, 0, len(t.procs))
	for _, p := range t.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out
}

// StopAll refuses new processes and stops every tracked one, in parallel.
func (t *ProcTable) StopAll(grace time.Duration) {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range t.Live() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Stop(grace)
		}()
	}
	wg.Wait()
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("tail: %w", err)
	}
	defer f.Close()
	const max = 256 << 10
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("tail: %w", err)
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return "", fmt.Errorf("tail: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("tail: %w", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n"))), nil
}
