package harness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// HookProcess runs the built hook binary (bin/etcd-hook, from `make build`)
// as Metacontroller would reach it: an HTTP server on 127.0.0.1. It keeps its
// port across restarts so that the proxy in front of it needs no change.
type HookProcess struct {
	Binary  string
	Args    []string // extra arguments after --addr
	Env     []string // extra environment (KEY=VALUE)
	LogPath string

	procs *ProcTable
	port  int

	mu   sync.Mutex
	proc *testenv.Process
}

// NewHookProcess prepares a hook process on a free port; Start runs it.
func NewHookProcess(procs *ProcTable, binary, logPath string, args, env []string) (*HookProcess, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, fmt.Errorf("hook: %w", err)
	}
	return &HookProcess{Binary: binary, Args: args, Env: env, LogPath: logPath, procs: procs, port: port}, nil
}

// Addr is host:port of the hook.
func (h *HookProcess) Addr() string { return "127.0.0.1:" + strconv.Itoa(h.port) }

// URL is the hook's base URL.
func (h *HookProcess) URL() string { return "http://" + h.Addr() }

// Proc returns the running process, or nil.
func (h *HookProcess) Proc() *testenv.Process {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc != nil && h.proc.Exited() {
		return nil
	}
	return h.proc
}

// Start launches the hook and waits until GET /healthz answers 200.
func (h *HookProcess) Start(ctx context.Context) error {
	if err := testenv.Executable(h.Binary); err != nil {
		return fmt.Errorf("hook: %w", err)
	}
	h.mu.Lock()
	if h.proc != nil && !h.proc.Exited() {
		h.mu.Unlock()
		return fmt.Errorf("hook already running (pid %d)", h.proc.Pid)
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + os.TempDir(),
		// The pure Go resolver, reading the sandbox's resolv.conf.
		"GODEBUG=netdns=go",
	}
	env = append(env, h.Env...)
	p, err := h.procs.Start(testenv.ProcessSpec{
		Name:    "etcd-hook",
		Path:    h.Binary,
		Args:    append([]string{"--addr", h.Addr()}, h.Args...),
		Env:     env,
		LogPath: h.LogPath,
	})
	if err != nil {
		h.mu.Unlock()
		return fmt.Errorf("hook: %w", err)
	}
	h.proc = p
	h.mu.Unlock()
	return h.waitHealthy(ctx, p)
}

func (h *HookProcess) waitHealthy(ctx context.Context, p *testenv.Process) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	var lastErr error
	for ctx.Err() == nil {
		if p.Exited() {
			return fmt.Errorf("hook exited with code %d during startup (log %s)", p.ExitCode(), h.LogPath)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL()+"/healthz", nil)
		if err != nil {
			return fmt.Errorf("hook healthz: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		lastErr = err
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("hook not healthy at %s/healthz: %w (last: %v)", h.URL(), ctx.Err(), lastErr)
}

// Kill is kill -9 of the hook, for scenarios that crash it mid-flight.
func (h *HookProcess) Kill() error {
	p := h.Proc()
	if p == nil {
		return fmt.Errorf("hook is not running: %w", ErrNotFound)
	}
	return p.Kill()
}

// Stop ends the hook gracefully (SIGTERM, then SIGKILL after grace).
func (h *HookProcess) Stop(grace time.Duration) {
	if p := h.Proc(); p != nil {
		_ = p.Stop(grace)
	}
}

// Restart kills the hook (SIGKILL) if it runs and starts it again.
func (h *HookProcess) Restart(ctx context.Context) error {
	if p := h.Proc(); p != nil {
		if err := p.Kill(); err != nil {
			return fmt.Errorf("hook: %w", err)
		}
	}
	return h.Start(ctx)
}
