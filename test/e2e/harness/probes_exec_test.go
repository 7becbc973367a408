package harness

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestParseEtcdctlProbe(t *testing.T) {
	const tls = "ETCDCTL_API=3 etcdctl --endpoints=https://localhost:2379 --cert=/etc/etcdtls/operator/etcd-tls/etcd-client.crt " +
		"--key=/etc/etcdtls/operator/etcd-tls/etcd-client.key --cacert=/etc/etcdtls/operator/etcd-tls/etcd-client-ca.crt endpoint status"
	api3 := []corev1.EnvVar{{Name: "ETCDCTL_API", Value: "3"}}
	tests := []struct {
		reason  string
		command []string
		want    etcdctlProbe
		err     string
	}{
		{
			reason:  "the CoreOS operator's probe without TLS",
			command: []string{"/bin/sh", "-ec", "ETCDCTL_API=3 etcdctl endpoint status"},
			want:    etcdctlProbe{env: api3, argv: []string{"etcdctl", "endpoint", "status"}},
		},
		{
			reason:  "its TLS variant: the flags go to etcdctl as written",
			command: []string{"/bin/sh", "-ec", tls},
			want:    etcdctlProbe{env: api3, argv: append([]string{"etcdctl"}, strings.Fields(tls)[2:]...)},
		},
		{
			reason:  "no assignment, etcdctl by its path, a flag value as a word of its own, sh -c",
			command: []string{"sh", "-c", "/usr/local/bin/etcdctl --endpoints http://localhost:2379 endpoint status"},
			want:    etcdctlProbe{argv: []string{"/usr/local/bin/etcdctl", "--endpoints", "http://localhost:2379", "endpoint", "status"}},
		},
		{
			reason:  "another etcdctl command",
			command: []string{"/bin/sh", "-ec", "ETCDCTL_API=3 etcdctl endpoint health"},
			err:     "etcdctl endpoint health is not endpoint status",
		},
		{
			reason:  "a pipe is shell syntax the harness does not run",
			command: []string{"/bin/sh", "-ec", "etcdctl endpoint status | grep true"},
			err:     `shell syntax '|'`,
		},
		{
			reason:  "two commands",
			command: []string{"/bin/sh", "-ec", "etcdctl endpoint status; echo ok"},
			err:     `shell syntax ';'`,
		},
		{
			reason:  "not through a shell",
			command: []string{"etcdctl", "endpoint", "status"},
			err:     "not a /bin/sh -c <script> command",
		},
		{
			reason:  "no etcdctl",
			command: []string{"/bin/sh", "-c", "ETCDCTL_API=3 true"},
			err:     "the script runs no etcdctl",
		},
	}
	for _, tt := range tests {
		got, err := parseEtcdctlProbe(tt.command)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want one with %q", tt.reason, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.reason, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(etcdctlProbe{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.reason, diff)
		}
	}
}

// TestProbeEndpoints: the endpoints on the Pod's loopback go to
// forwarders, one per port, keeping scheme and host; the others are left
// alone; without any, etcdctl's default gets one.
func TestProbeEndpoints(t *testing.T) {
	tests := []struct {
		reason string
		args   []string
		env    []string
		want   []string // P2379, P2380 stand for the forwarders' ports
		envOut []string
	}{
		{
			reason: "no endpoint: etcdctl's default 127.0.0.1:2379",
			args:   []string{"endpoint", "status"},
			want:   []string{"--endpoints=127.0.0.1:P2379", "endpoint", "status"},
		},
		{
			reason: "https://localhost keeps its name, for the certificate",
			args:   []string{"--endpoints=https://localhost:2379", "endpoint", "status"},
			want:   []string{"--endpoints=https://localhost:P2379", "endpoint", "status"},
		},
		{
			reason: "a list: loopback ones forwarded (one forwarder per port), a DNS name left to DNS",
			args:   []string{"--endpoints", "http://127.0.0.1:2379,http://m.c.default.svc:2379,http://0.0.0.0:2380", "endpoint", "status"},
			want:   []string{"--endpoints", "http://127.0.0.1:P2379,http://m.c.default.svc:2379,http://0.0.0.0:P2380", "endpoint", "status"},
		},
		{
			reason: "ETCDCTL_ENDPOINTS counts as endpoints",
			args:   []string{"endpoint", "status"},
			env:    []string{"ETCDCTL_ENDPOINTS=http://localhost:2379"},
			want:   []string{"endpoint", "status"}, envOut: []string{"ETCDCTL_ENDPOINTS=http://localhost:P2379"},
		},
	}
	for _, tt := range tests {
		fw := &probeForwarders{ctx: t.Context(), targets: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, local: map[string]string{}}
		plan := &launch{Args: append([]string(nil), tt.args...), Env: append([]string(nil), tt.env...)}
		if err := fw.rewrite(plan); err != nil {
			t.Fatalf("%s: %v", tt.reason, err)
		}
		fw.close()
		repl := strings.NewReplacer("P2379", fw.local["2379"], "P2380", fw.local["2380"])
		var want, wantEnv []string
		for _, a := range tt.want {
			want = append(want, repl.Replace(a))
		}
		for _, a := range tt.envOut {
			wantEnv = append(wantEnv, repl.Replace(a))
		}
		if diff := cmp.Diff(want, plan.Args); diff != "" {
			t.Errorf("%s: args (-want +got):\n%s", tt.reason, diff)
		}
		if diff := cmp.Diff(wantEnv, plan.Env); diff != "" {
			t.Errorf("%s: env (-want +got):\n%s", tt.reason, diff)
		}
	}
}

// execTarget is what a running container's exec probe runs in, built the
// way the kubelet builds it at the container's start.
func execTarget(t *testing.T, env *Env, pod, container string) (*podWorker, podContext, corev1.Container) {
	t.Helper()
	w, err := env.Kubelet.workerFor(ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := env.Pod(ns, pod)
	var p corev1.Pod
	if err := json.Unmarshal(mustJSON(obj), &p); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	vols := maps.Clone(w.volumes)
	w.mu.Unlock()
	pc := podContext{pod: &p, ip: w.ip, lo: w.lo, binDir: env.Kubelet.cfg.BinDir, volumes: vols, home: t.TempDir(), rootfs: t.TempDir()}
	for _, c := range p.Spec.Containers {
		if c.Name == container {
			return w, pc, c
		}
	}
	t.Fatalf("pod %s has no container %s", pod, container)
	return nil, podContext{}, corev1.Container{}
}

// TestExecProbe runs `etcdctl endpoint status` exec probes against a real
// etcd in a CoreOS member Pod: Ready through its readiness probe, then
// each command as the kubelet runs it while etcd serves, is frozen, and
// is gone.
func TestExecProbe(t *testing.T) {
	requireEtcd(t, "3.6.16")
	env, _ := newEnvWithFake(t, Options{})
	const cluster = "probed"
	for _, svc := range CoreOSServices(cluster, ns, coreosOwner) {
		mustCreate(t, env.API, svc)
	}
	member := CoreOSMemberName(cluster)
	mustCreate(t, env.API, CoreOSMemberPod(cluster, ns, member, "3.6.16", []string{CoreOSPeerURLPair(ns, member)}, "new", "t", coreosOwner, ""))
	// The readiness probe is the exec probe: Ready means it passed.
	_, err := env.WaitPodReady(ns, member, 30*time.Second)
	mustWait(t, err)
	w, pc, ctr := execTarget(t, env, member, "etcd")
	addr := CoreOSMemberAddr(ns, member)
	probe := func(script string, timeout time.Duration) (bool, string) {
		ctx, cancel := context.WithTimeout(env.Ctx(), timeout)
		defer cancel()
		return w.execProbe(ctx, "test", []string{"/bin/sh", "-ec", script}, &ctr, pc)
	}
	type result struct {
		OK  bool
		Msg string // a part of the message
	}
	check := func(phase string, tests []struct {
		reason, script string
		want           result
	}, timeout time.Duration) {
		t.Helper()
		for _, tt := range tests {
			ok, msg := probe(tt.script, timeout)
			got := result{OK: ok, Msg: tt.want.Msg}
			if !strings.Contains(msg, tt.want.Msg) {
				got.Msg = msg
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s: %s (-want +got):\n%s", phase, tt.reason, diff)
			}
		}
	}
	check("etcd serving", []struct {
		reason, script string
		want           result
	}{
		{"the CoreOS probe: etcdctl's default 127.0.0.1:2379 reaches etcd on 0.0.0.0", "ETCDCTL_API=3 etcdctl endpoint status", result{OK: true}},
		{"localhost, as the TLS variant names it", "ETCDCTL_API=3 etcdctl --endpoints=http://localhost:2379 endpoint status", result{OK: true}},
		{"the member's DNS name, left to DNS", "etcdctl --endpoints=http://" + addr + ":2379 endpoint status", result{OK: true}},
		{"a port nothing listens on in the Pod", "etcdctl --endpoints=http://localhost:2999 --dial-timeout=1s --command-timeout=1s endpoint status", result{Msg: "context deadline exceeded"}},
		{"another command is not run", "etcdctl endpoint health", result{Msg: "the harness runs only `etcdctl ... endpoint status` exec probes"}},
	}, 5*time.Second)

	if err := env.Kubelet.Pause(ns, member, "etcd"); err != nil {
		t.Fatal(err)
	}
	check("etcd frozen", []struct {
		reason, script string
		want           result
	}{
		{"the probe outlasts its timeout and is killed", "ETCDCTL_API=3 etcdctl endpoint status", result{Msg: "timed out"}},
	}, 1500*time.Millisecond)
	if err := env.Kubelet.Resume(ns, member, "etcd"); err != nil {
		t.Fatal(err)
	}

	if err := env.Kubelet.KillContainer(ns, member, "etcd"); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(10*time.Second, member+" Failed", func() (bool, string) {
		p, _ := env.Pod(ns, member)
		return nestedString(p, "status", "phase") == "Failed", PodSummary(p)
	}))
	check("etcd gone", []struct {
		reason, script string
		want           result
	}{
		{"nothing answers: etcdctl fails, its error is the message", "ETCDCTL_API=3 etcdctl --dial-timeout=1s --command-timeout=1s endpoint status", result{Msg: "context deadline exceeded"}},
	}, 5*time.Second)
}
