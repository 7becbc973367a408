package harness

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const fakeHookEnv = "HARNESS_TEST_FAKE_HOOK"

// runFakeHookProcess serves the fake hook on --addr, with /healthz, the way
// bin/etcd-hook is expected to.
func runFakeHookProcess(args []string) int {
	addr := ""
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--addr="); ok {
			addr = v
		} else if a == "--addr" && i+1 < len(args) {
			addr = args[i+1]
		}
	}
	if addr == "" {
		fmt.Fprintln(os.Stderr, "fake hook: --addr is required")
		return 2
	}
	// An image that cannot be pulled: the Pod gets an IP and a DNS name,
	// and no etcd runs.
	f := &fakeHook{cfg: fakeConfig{version: "9.9.9"}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	// Lets the test check name resolution from inside the hook process.
	mux.HandleFunc("GET /resolve", func(w http.ResponseWriter, r *http.Request) {
		addrs, err := net.DefaultResolver.LookupHost(r.Context(), r.URL.Query().Get("name"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		_, _ = io.WriteString(w, strings.Join(addrs, ","))
	})
	mux.Handle("/", f)
	fmt.Fprintln(os.Stderr, "fake hook listening on", addr)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "fake hook:", err)
		return 1
	}
	return 0
}

// TestHookProcessKillRestart runs a hook as a separate process, kills it with
// SIGKILL, checks that syncs fail without applying anything, and restarts it
// on the same address.
func TestHookProcessKillRestart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := New(t, Options{HookBinary: exe, HookEnv: []string{fakeHookEnv + "=1"}})
	const cluster = "hooked"
	if _, err := env.MC.CreateParent(ns, cluster, map[string]any{"size": 1}); err != nil {
		t.Fatal(err)
	}
	observed := func(gen float64) func() (bool, string) {
		return func() (bool, string) {
			p, _ := env.MC.Parent(ns, cluster)
			st := nestedMap(p, "status")
			return st["observedGeneration"] == gen, fmt.Sprint(st)
		}
	}
	mustWait(t, env.WaitFor(10*time.Second, "first sync", observed(1)))
	// The hook process resolves Pod names through the harness DNS too.
	var podIP string
	mustWait(t, env.WaitFor(10*time.Second, "pod IP", func() (bool, string) {
		p, _ := env.Pod(ns, cluster+"-0")
		podIP = nestedString(p, "status", "podIP")
		return podIP != "", PodSummary(p)
	}))
	resp, err := plainHTTP.Get(env.Hook.URL() + "/resolve?name=" + cluster + "-0." + cluster + ".default.svc")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != podIP {
		t.Errorf("hook process resolved the pod to %d %q, want %s", resp.StatusCode, body, podIP)
	}
	pid := env.Hook.Proc().Pid
	if err := env.Hook.Kill(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("hook pid %d alive after Kill", pid)
	}
	errsBefore := env.MC.Metrics(ns, cluster).HookErrors
	if _, err := env.MC.MergePatchParentSpec(ns, cluster, map[string]any{"size": 3}); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(10*time.Second, "failed syncs while the hook is down", func() (bool, string) {
		m := env.MC.Metrics(ns, cluster)
		return m.HookErrors > errsBefore+2, fmt.Sprintf("%+v", m)
	}))
	if ok, st := observed(1)(); !ok {
		t.Errorf("status changed while the hook was down: %s", st)
	}
	if err := env.Hook.Restart(env.Ctx()); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(10*time.Second, "sync after restart", observed(2)))
	if tail, err := testenv.TailFile(env.Hook.LogPath, 50); err != nil || strings.Count(tail, "fake hook listening") != 2 {
		t.Errorf("hook log should show two starts: %v\n%s", err, tail)
	}
}
