package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeState is what the probes of one container instance have concluded.
type probeState struct {
	mu      sync.Mutex
	ready   bool
	started bool
	kill    string
}

func (p *probeState) isReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

func (p *probeState) isStarted() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

func (p *probeState) killRequest() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kill
}

// set applies f and reports whether anything changed.
func (p *probeState) set(f func(*probeState)) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ready, started, kill := p.ready, p.started, p.kill
	f(p)
	return ready != p.ready || started != p.started || kill != p.kill
}

// startProbes launches the probes of a freshly started container. Without a
// readiness probe the container is ready once started, and without a startup
// probe it is started at once, as in Kubernetes.
func (w *podWorker) startProbes(pod *corev1.Pod, c *ctrState) {
	ctx, cancel := context.WithCancel(w.k.ctx)
	ps := &probeState{ready: c.spec.ReadinessProbe == nil, started: c.spec.StartupProbe == nil}
	c.probes, c.cancelProbes = ps, cancel
	spec, pc := c.spec, c.pc
	for _, pr := range []struct {
		kind  string
		probe *corev1.Probe
	}{{"startup", spec.StartupProbe}, {"readiness", spec.ReadinessProbe}, {"liveness", spec.LivenessProbe}} {
		if pr.probe != nil {
			go w.runProbe(ctx, pr.kind, pr.probe, &spec, pc, ps)
		}
	}
}

func (w *podWorker) capped(secs int32, def, max time.Duration) time.Duration {
	d := def
	if secs > 0 {
		d = time.Duration(secs) * time.Second
	}
	return min(d, max)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runProbe drives one probe until the container instance ends (ctx).
func (w *podWorker) runProbe(ctx context.Context, kind string, probe *corev1.Probe, c *corev1.Container, pc podContext, ps *probeState) {
	period := w.capped(probe.PeriodSeconds, 10*time.Second, w.k.cfg.ProbePeriodMax)
	delay := w.capped(probe.InitialDelaySeconds, 0, w.k.cfg.ProbeInitialDelayMax)
	timeout := w.capped(probe.TimeoutSeconds, time.Second, 5*time.Second)
	succT, failT := int(probe.SuccessThreshold), int(probe.FailureThreshold)
	if succT < 1 {
		succT = 1
	}
	if failT < 1 {
		failT = 3
	}
	if !sleepCtx(ctx, delay) {
		return
	}
	succ, fail := 0, 0
	lastMsg := ""
	for ctx.Err() == nil {
		if kind != "startup" && !ps.isStarted() {
			if !sleepCtx(ctx, period) {
				return
			}
			continue
		}
		ok, msg := w.probeOnce(ctx, kind, probe, c, pc, timeout)
		if ctx.Err() != nil {
			return
		}
		if ok {
			succ, fail = succ+1, 0
		} else {
			succ, fail = 0, fail+1
			if msg != lastMsg && fail == failT {
				w.k.event(w.ref, "container %s: %s probe failed: %s", c.Name, kind, msg)
			}
		}
		lastMsg = msg
		changed := false
		switch kind {
		case "readiness":
			if ok && succ >= succT {
				changed = ps.set(func(p *probeState) { p.ready = true })
			} else if !ok && fail >= failT {
				changed = ps.set(func(p *probeState) { p.ready = false })
			}
		case "liveness":
			if !ok && fail >= failT {
				ps.set(func(p *probeState) { p.kill = "Liveness probe failed: " + msg })
				w.poke()
				return
			}
		case "startup":
			if ok {
				ps.set(func(p *probeState) { p.started = true })
				w.poke()
				return
			}
			if fail >= failT {
				ps.set(func(p *probeState) { p.kill = "Startup probe failed: " + msg })
				w.poke()
				return
			}
		}
		if changed {
			w.poke()
		}
		if !sleepCtx(ctx, period) {
			return
		}
	}
}

func probePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("port %q not found in the container's ports", p.StrVal)
}

// probeOnce runs one probe: httpGet and tcpSocket against the Pod IP, as the
// kubelet does from the node (HTTPS is not verified, as in Kubernetes);
// exec in the container (probes_exec.go).
func (w *podWorker) probeOnce(ctx context.Context, kind string, probe *corev1.Probe, c *corev1.Container, pc podContext, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case probe.HTTPGet != nil:
		g := probe.HTTPGet
		port, err := probePort(g.Port, c)
		if err != nil {
			return false, err.Error()
		}
		host := g.Host
		if host == "" {
			host = w.ip.String()
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.IsLoopback() {
			return false, fmt.Sprintf("host %q: the harness only probes loopback addresses", host)
		}
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		path := g.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err.Error()
		}
		for _, h := range g.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		req.Header.Set("User-Agent", "kube-probe/1.36")
		client := &http.Client{
			Transport: &http.Transport{
				Proxy:             nil,
				DisableKeepAlives: true,
				TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kubelet probes do not verify either
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 400 {
			return true, ""
		}
		return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	case probe.TCPSocket != nil:
		port, err := probePort(probe.TCPSocket.Port, c)
		if err != nil {
			return false, err.Error()
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(w.ip.String(), strconv.Itoa(port)))
		if err != nil {
			return false, err.Error()
		}
		conn.Close()
		return true, ""
	case probe.Exec != nil:
		return w.execProbe(ctx, kind, probe.Exec.Command, c, pc)
	case probe.GRPC != nil:
		return false, "gRPC probes are not supported by the harness"
	}
	return false, "probe has no handler"
}
