package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// Exec probes: the CoreOS etcd-operator's, and no other. Its member Pods
// probe liveness and readiness with
//
//	/bin/sh -ec "ETCDCTL_API=3 etcdctl endpoint status"
//	/bin/sh -ec "ETCDCTL_API=3 etcdctl --endpoints=https://localhost:2379 --cert=... --key=... --cacert=... endpoint status"
//
// The kubelet runs such a command as a process of the container: the
// image's etcdctl (bin/etcdctl-v<tag>), the container's env (plus the
// shell's VAR=value prefix), volumes, writable layer and Pod group, as
// podspec.go translates a container; exit code 0 is a success, anything
// else a failure whose message is the command's output, and a run that
// outlasts the probe's timeout is killed and fails. Inside a Pod, an
// endpoint on the Pod's loopback (etcdctl's default 127.0.0.1:2379,
// localhost, 0.0.0.0) reaches what listens there, etcd on 0.0.0.0
// included; here such an endpoint is sent to a forwarder on the host's
// 127.0.0.1 that passes each connection to the Pod's private loopback
// address or, where nothing listens on it, to the Pod IP (where the harness
// binds 0.0.0.0). The URL etcdctl dials keeps its scheme and host, so TLS
// is verified against the name the Pod would use (localhost). Other
// endpoints (a DNS name, a Pod IP) are left as written. The output goes to
// <namespace>_<pod>_<container>.<kind>-probe.log beside the container's
// log.

// etcdctlProbe is a parsed `sh -c "[VAR=value ...] etcdctl [flags] endpoint status"`.
type etcdctlProbe struct {
	env  []corev1.EnvVar // the shell's assignments before the command
	argv []string        // etcdctl, as written, and its arguments
}

var shellAssign = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)

// shellSyntax is what the probe's script must not contain: quoting,
// expansions, redirections, several commands, globs. Without them the
// shell only splits words, which strings.Fields does the same.
const shellSyntax = "'\"\\$`;|&<>(){}*?~#!\n"

// etcdctlValueFlags are etcdctl's global flags that take a value, which
// may follow as a word of its own.
var etcdctlValueFlags = []string{
	"--endpoints", "--cert", "--key", "--cacert", "--dial-timeout", "--command-timeout",
	"--keepalive-time", "--keepalive-timeout", "--user", "--password", "--discovery-srv",
	"--discovery-srv-name", "-w", "--write-out", "--auth-jwt-token-ttl", "--max-request-bytes",
	"--max-recv-bytes",
}

// parseEtcdctlProbe recognises an `etcdctl ... endpoint status` exec probe.
func parseEtcdctlProbe(command []string) (etcdctlProbe, error) {
	if len(command) != 3 || path.Base(command[0]) != "sh" || !slices.Contains([]string{"-c", "-ec", "-ce"}, command[1]) {
		return etcdctlProbe{}, errors.New("not a /bin/sh -c <script> command")
	}
	script := strings.TrimSpace(command[2])
	if i := strings.IndexAny(script, shellSyntax); i >= 0 {
		return etcdctlProbe{}, fmt.Errorf("shell syntax %q in the script", script[i])
	}
	words := strings.Fields(script)
	var out etcdctlProbe
	i := 0
	for ; i < len(words); i++ {
		m := shellAssign.FindStringSubmatch(words[i])
		if m == nil {
			break
		}
		out.env = append(out.env, corev1.EnvVar{Name: m[1], Value: m[2]})
	}
	if i == len(words) || path.Base(words[i]) != "etcdctl" {
		return etcdctlProbe{}, errors.New("the script runs no etcdctl")
	}
	out.argv = words[i:]
	var positional []string
	for j := 1; j < len(out.argv); j++ {
		a := out.argv[j]
		if !strings.HasPrefix(a, "-") {
			positional = append(positional, a)
			continue
		}
		if !strings.Contains(a, "=") && slices.Contains(etcdctlValueFlags, a) {
			if j++; j == len(out.argv) {
				return etcdctlProbe{}, fmt.Errorf("flag %s without a value", a)
			}
		}
	}
	if !slices.Equal(positional, []string{"endpoint", "status"}) {
		return etcdctlProbe{}, fmt.Errorf("etcdctl %s is not endpoint status", strings.Join(positional, " "))
	}
	return out, nil
}

// expandStatic expands $(VAR) in the command with the container's env
// values that are not valueFrom, as the kubelet does for exec probes
// (ExpandContainerCommandOnlyStatic).
func expandStatic(command []string, env []corev1.EnvVar) []string {
	lookup := func(name string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if env[i].Name == name && env[i].ValueFrom == nil {
				return env[i].Value, true
			}
		}
		return "", false
	}
	out := make([]string, len(command))
	for i, a := range command {
		out[i] = expandVars(a, lookup)
	}
	return out
}

// execProbe runs one exec probe in the container instance pc describes,
// within ctx (which carries the probe's timeout).
func (w *podWorker) execProbe(ctx context.Context, kind string, command []string, c *corev1.Container, pc podContext) (bool, string) {
	probe, err := parseEtcdctlProbe(expandStatic(command, c.Env))
	if err != nil {
		return false, fmt.Sprintf("exec probe %q: %v: the harness runs only `etcdctl ... endpoint status` exec probes", command, err)
	}
	spec := c.DeepCopy()
	spec.Command, spec.Args = probe.argv, nil
	spec.Env = append(spec.Env, probe.env...)
	spec.LivenessProbe, spec.ReadinessProbe, spec.StartupProbe = nil, nil, nil
	plan, err := planContainer(pc, spec)
	if err != nil {
		return false, err.Error()
	}
	fwCtx, cancel := context.WithCancel(ctx)
	fw := &probeForwarders{ctx: fwCtx, targets: []netip.Addr{pc.lo, pc.ip}, local: map[string]string{}}
	defer fw.close()
	defer cancel() // first: a dial in flight gives up
	if err := fw.rewrite(plan); err != nil {
		return false, err.Error()
	}
	log := strings.TrimSuffix(w.k.ContainerLog(pc.pod.Namespace, pc.pod.Name, c.Name), ".log") + "." + kind + "-probe.log"
	p, err := w.k.procs.Start(testenv.ProcessSpec{
		Name:    fmt.Sprintf("%s/%s/%s %s probe", pc.pod.Namespace, pc.pod.Name, c.Name, kind),
		Path:    plan.Binary,
		Args:    plan.Args,
		Env:     plan.Env,
		Dir:     plan.Dir,
		LogPath: log,
		Gid:     w.k.podGroup(pc.ip),
	})
	if err != nil {
		return false, err.Error()
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		_ = p.Kill()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return false, fmt.Sprintf("command %q timed out", strings.Join(command, " "))
		}
		return false, "probe cancelled"
	}
	out := probeOutput(p)
	if code := p.ExitCode(); code != 0 {
		if out == "" {
			out = fmt.Sprintf("command %q exited with %d", strings.Join(command, " "), code)
		}
		return false, out
	}
	return true, ""
}

// probeOutput is what one run wrote, without testenv's marker lines, at
// most its last 10 lines.
func probeOutput(p *testenv.Process) string {
	b, err := testenv.ReadLogFrom(p.LogPath, p.LogOffset)
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, testenv.LogMarker) {
			lines = append(lines, l)
		}
	}
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

// probeForwarders give a probe's process the Pod's loopback: one listener
// on the host's 127.0.0.1 per port of a loopback endpoint, each connection
// passed to the first of targets (the Pod's private loopback address, then
// its IP) that accepts it. They live as long as the probe run.
type probeForwarders struct {
	ctx     context.Context
	targets []netip.Addr
	local   map[string]string // Pod port -> forwarder port

	mu    sync.Mutex
	lns   []net.Listener
	conns []net.Conn
	wg    sync.WaitGroup
}

// podLoopbackHosts are the hosts that mean "this Pod" to a client inside
// it, as bindListenURLs treats them.
var podLoopbackHosts = []string{"localhost", "127.0.0.1", "::1", "0.0.0.0", "::", ""}

// rewrite points the loopback endpoints of plan (--endpoints, its
// ETCDCTL_ENDPOINTS, or etcdctl's default 127.0.0.1:2379) at forwarders.
func (f *probeForwarders) rewrite(plan *launch) error {
	found := false
	for i := 0; i < len(plan.Args); i++ {
		a := plan.Args[i]
		var err error
		switch {
		case strings.HasPrefix(a, "--endpoints="):
			plan.Args[i], err = f.endpoints(a, "--endpoints=")
		case a == "--endpoints" && i+1 < len(plan.Args):
			i++
			plan.Args[i], err = f.endpoints(plan.Args[i], "")
		default:
			continue
		}
		if err != nil {
			return err
		}
		found = true
	}
	for i, kv := range plan.Env {
		if strings.HasPrefix(kv, "ETCDCTL_ENDPOINTS=") {
			v, err := f.endpoints(kv, "ETCDCTL_ENDPOINTS=")
			if err != nil {
				return err
			}
			plan.Env[i], found = v, true
		}
	}
	if !found {
		def, err := f.endpoints("127.0.0.1:2379", "")
		if err != nil {
			return err
		}
		plan.Args = append([]string{"--endpoints=" + def}, plan.Args...)
	}
	return nil
}

// endpoints rewrites a comma-separated endpoint list after prefix.
func (f *probeForwarders) endpoints(v, prefix string) (string, error) {
	list := strings.Split(strings.TrimPrefix(v, prefix), ",")
	for i, ep := range list {
		scheme, hostport, ok := strings.Cut(ep, "://")
		if !ok {
			scheme, hostport = "", ep
		}
		host, port, err := net.SplitHostPort(strings.TrimSuffix(hostport, "/"))
		if err != nil || !slices.Contains(podLoopbackHosts, host) {
			continue
		}
		local, err := f.forward(port)
		if err != nil {
			return "", err
		}
		ep = net.JoinHostPort(host, local)
		if scheme != "" {
			ep = scheme + "://" + ep
		}
		list[i] = ep
	}
	return prefix + strings.Join(list, ","), nil
}

// forward returns the local port that reaches port of the Pod.
func (f *probeForwarders) forward(port string) (string, error) {
	if p, ok := f.local[port]; ok {
		return p, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("exec probe: the Pod's loopback: %w", err)
	}
	f.mu.Lock()
	f.lns = append(f.lns, ln)
	f.mu.Unlock()
	_, local, _ := net.SplitHostPort(ln.Addr().String())
	f.local[port] = local
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.pipe(c, port)
			}()
		}
	}()
	return local, nil
}

func (f *probeForwarders) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lns == nil {
		c.Close()
		return false
	}
	f.conns = append(f.conns, c)
	return true
}

func (f *probeForwarders) pipe(c net.Conn, port string) {
	if !f.track(c) {
		return
	}
	var up net.Conn
	for _, t := range f.targets {
		if !t.IsValid() {
			continue
		}
		d := net.Dialer{Timeout: 2 * time.Second}
		var err error
		if up, err = d.DialContext(f.ctx, "tcp", net.JoinHostPort(t.String(), port)); err == nil {
			break
		}
	}
	if up == nil || !f.track(up) {
		c.Close()
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
	c.Close()
	up.Close()
}

// close ends the listeners and every forwarded connection.
func (f *probeForwarders) close() {
	f.mu.Lock()
	lns, conns := f.lns, f.conns
	f.lns, f.conns = nil, nil
	f.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	f.wg.Wait()
}
