package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// shell returns sh, which every test here runs as its child.
func shell(t *testing.T) string {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh to run as a child: %v", err)
	}
	return sh
}

// pathEnv is the environment a child that runs sleep needs.
func pathEnv() []string { return []string{"PATH=" + os.Getenv("PATH")} }

func startSh(t *testing.T, log, script string, env []string) *Process {
	t.Helper()
	p, err := Start(ProcessSpec{Name: "sh", Path: shell(t), Args: []string{"-c", script}, Env: env, LogPath: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	return p
}

func waitDone(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s (pid %d) did not exit", p.Name, p.Pid)
	}
}

// waitLog waits until a line the child wrote starts with want, its sign
// that it is ready for what the test does next. The marker lines are left
// out: they quote the script.
func waitLog(t *testing.T, path, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(path)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, want) {
				return string(b)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never held %q", path, want)
	return ""
}

func TestProcessExit(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	t.Setenv("TESTENV_FROM_THE_SHELL", "leaked")
	tests := []struct {
		reason   string
		script   string
		wantCode int
		wantSig  syscall.Signal
		wantOut  string
	}{
		{"nothing of the test's environment is inherited", `echo "[$TESTENV_FROM_THE_SHELL]"`, 0, 0, "[]"},
		{"an exit code is reported as it is", "echo failing; exit 3", 3, 0, "failing"},
		{"a signalled process is 128+signal, as the kubelet reports it", "echo killing; kill -9 $$", 137, syscall.SIGKILL, "killing"},
	}
	for _, tt := range tests {
		p := startSh(t, log, tt.script, nil)
		waitDone(t, p)
		if got := p.ExitCode(); got != tt.wantCode {
			t.Errorf("%s: exit code %d, want %d", tt.reason, got, tt.wantCode)
		}
		if got := p.Signaled(); got != tt.wantSig {
			t.Errorf("%s: signal %v, want %v", tt.reason, got, tt.wantSig)
		}
		// This run's part of the shared log: its marker line, its output,
		// the exit line.
		b, err := ReadLogFrom(log, p.LogOffset)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], LogMarker) || !strings.Contains(lines[0], " start sh: ") ||
			lines[1] != tt.wantOut || !strings.HasPrefix(lines[2], LogMarker) {
			t.Errorf("%s: this run's log:\n%s\nwant a start line, %q and an exit line", tt.reason, b, tt.wantOut)
		}
	}
	if runs := strings.Count(waitLog(t, log, "killing"), LogMarker); runs != 2*len(tests) {
		t.Errorf("the log holds %d marker lines, want a start and an exit line for each of %d runs", runs, len(tests))
	}
}

// TestStopEscalates: a process that ignores SIGTERM is killed once the
// grace period is over.
func TestStopEscalates(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	p := startSh(t, log, `trap "" TERM; echo ready; while :; do sleep 0.05; done`, pathEnv())
	waitLog(t, log, "ready")
	start := time.Now()
	if err := p.Stop(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > ReapTimeout {
		t.Errorf("Stop took %v: want the grace period, then SIGKILL", took)
	}
	if got := p.Signaled(); got != syscall.SIGKILL {
		t.Errorf("ended by %v, want SIGKILL", got)
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("a second Stop: %v, want nothing to do", err)
	}
}

// TestStopIsGraceful: a process that acts on SIGTERM ends by it, stopped
// (SIGSTOP) or not.
func TestStopIsGraceful(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	p := startSh(t, log, `trap "echo terminated; exit 0" TERM; echo ready; while :; do sleep 0.05; done`, pathEnv())
	waitLog(t, log, "ready")
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ReapTimeout); err != nil {
		t.Fatal(err)
	}
	if got := p.ExitCode(); got != 0 {
		t.Errorf("exit code %d, want 0 from the TERM trap", got)
	}
	waitLog(t, log, "terminated")
}

// TestKillTakesTheGroup: what the process started dies with it, as the
// rest of a container does.
func TestKillTakesTheGroup(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	p := startSh(t, log, `sleep 300 & echo "child $!"; wait`, pathEnv())
	out := waitLog(t, log, "child ")
	var child int
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, "child "); ok {
			child, _ = strconv.Atoi(s)
		}
	}
	if child <= 0 {
		t.Fatalf("no child pid in the log:\n%s", out)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(child) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(child, syscall.SIGKILL) // ours: it is sleep, started by the child above
			t.Fatalf("the child's child (pid %d) outlived Kill", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid runs: a zombie waiting for init to reap it
// has died.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func TestFreePort(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	writeFile(t, path, "one\ntwo\nthree\n")
	tests := []struct {
		reason string
		n      int
		want   string
	}{
		{"the last lines", 2, "two\nthree"},
		{"a short file whole", 10, "one\ntwo\nthree"},
	}
	for _, tt := range tests {
		got, err := TailFile(path, tt.n)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: TailFile(%d) (-want +got):\n%s", tt.reason, tt.n, diff)
		}
	}
}
