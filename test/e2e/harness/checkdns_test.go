package harness

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseCheckDNS(t *testing.T) {
	const host = "example-abcdefghij.example.default.svc"
	tests := []struct {
		reason string
		argv   []string
		want   checkDNS
		ok     bool
	}{
		{
			reason: "v0.9.4 as rendered, no DNSTimeoutInSecond: a counter that never reaches 0",
			argv:   []string{"/bin/sh", "-c", coreosCheckDNSScript(0, host)},
			want:   checkDNS{Host: host, Timeout: 0, Counted: true, Sleep: 1}, ok: true,
		},
		{
			reason: "v0.9.4 with DNSTimeoutInSecond: 30",
			argv:   []string{"/bin/sh", "-c", coreosCheckDNSScript(30, host)},
			want:   checkDNS{Host: host, Timeout: 30, Counted: true, Sleep: 1}, ok: true,
		},
		{
			reason: "v0.8.0 to v0.9.2: no counter, two seconds between lookups",
			argv:   []string{"/bin/sh", "-c", "\n\t\t\t\t\twhile ( ! nslookup " + host + " )\n\t\t\t\t\tdo\n\t\t\t\t\t\tsleep 2\n\t\t\t\t\tdone"},
			want:   checkDNS{Host: host, Sleep: 2}, ok: true,
		},
		{
			reason: "the same loop on one line, ; for newlines",
			argv:   []string{"/bin/sh", "-c", "while ( ! nslookup " + host + " ); do sleep 1; done"},
			want:   checkDNS{Host: host, Sleep: 1}, ok: true,
		},
		{
			reason: "the command split between command and args",
			argv:   []string{"sh", "-c", "while ( ! nslookup " + host + " ); do sleep 1; done"},
			want:   checkDNS{Host: host, Sleep: 1}, ok: true,
		},
		{
			reason: "a single lookup is another script",
			argv:   []string{"/bin/sh", "-c", "nslookup " + host},
		},
		{
			reason: "an extra command in the loop is another script",
			argv:   []string{"/bin/sh", "-c", "while ( ! nslookup " + host + " ); do echo waiting; sleep 1; done"},
		},
		{
			reason: "the timeout message changed is another script",
			argv:   []string{"/bin/sh", "-c", strings.Replace(coreosCheckDNSScript(5, host), "Timed out", "Gave up", 1)},
		},
		{
			reason: "not sh -c",
			argv:   []string{"/bin/bash", "-c", "while ( ! nslookup " + host + " ); do sleep 1; done"},
		},
		{
			reason: "no script at all",
			argv:   []string{"nslookup", host},
		},
	}
	for _, tt := range tests {
		got, ok := parseCheckDNS(tt.argv)
		if ok != tt.ok {
			t.Errorf("%s: recognised %v, want %v", tt.reason, ok, tt.ok)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.reason, diff)
		}
	}
}

// TestRunCheckDNS: the script's loop, against a lookup that resolves from
// a given try on (0: never).
func TestRunCheckDNS(t *testing.T) {
	tests := []struct {
		reason     string
		check      checkDNS
		resolvesAt int
		want       int
		lookups    int
		sleeps     []time.Duration
		out        string
	}{
		{
			reason: "resolves at once: exit 0 without sleeping",
			check:  checkDNS{Host: "h", Counted: true, Sleep: 1}, resolvesAt: 1,
			want: 0, lookups: 1,
		},
		{
			reason: "TIMEOUT_READY=0 waits as long as it takes, a second between lookups",
			check:  checkDNS{Host: "h", Counted: true, Sleep: 1}, resolvesAt: 6,
			want: 0, lookups: 6, sleeps: []time.Duration{time.Second, time.Second, time.Second, time.Second, time.Second},
		},
		{
			reason: "TIMEOUT_READY=3: three failed lookups, then exit 1 with the message, no sleep after the last",
			check:  checkDNS{Host: "h", Timeout: 3, Counted: true, Sleep: 1},
			want:   1, lookups: 3, sleeps: []time.Duration{time.Second, time.Second},
			out: "Timed out waiting for DNS entry\n",
		},
		{
			reason: "TIMEOUT_READY=3 and the name resolves at the third lookup: in time",
			check:  checkDNS{Host: "h", Timeout: 3, Counted: true, Sleep: 1}, resolvesAt: 3,
			want: 0, lookups: 3, sleeps: []time.Duration{time.Second, time.Second},
		},
		{
			reason: "TIMEOUT_READY=1: one lookup only",
			check:  checkDNS{Host: "h", Timeout: 1, Counted: true, Sleep: 1},
			want:   1, lookups: 1, out: "Timed out waiting for DNS entry\n",
		},
		{
			reason: "a negative TIMEOUT_READY never reaches 0 either",
			check:  checkDNS{Host: "h", Timeout: -1, Counted: true, Sleep: 1}, resolvesAt: 4,
			want: 0, lookups: 4, sleeps: []time.Duration{time.Second, time.Second, time.Second},
		},
		{
			reason: "before v0.9.3: no counter, two seconds between lookups",
			check:  checkDNS{Host: "h", Sleep: 2}, resolvesAt: 3,
			want: 0, lookups: 3, sleeps: []time.Duration{2 * time.Second, 2 * time.Second},
		},
	}
	for _, tt := range tests {
		lookups := 0
		var sleeps []time.Duration
		var out strings.Builder
		got := runCheckDNS(tt.check, func(host string) bool {
			if host != tt.check.Host {
				t.Errorf("%s: looked up %q, want %q", tt.reason, host, tt.check.Host)
			}
			lookups++
			if lookups > 100 {
				t.Fatalf("%s: still looking up after 100 tries", tt.reason)
			}
			return tt.resolvesAt > 0 && lookups >= tt.resolvesAt
		}, func(d time.Duration) { sleeps = append(sleeps, d) }, &out)
		type result struct {
			Code, Lookups int
			Sleeps        []time.Duration
			Out           string
		}
		if diff := cmp.Diff(result{tt.want, tt.lookups, tt.sleeps, tt.out}, result{got, lookups, sleeps, out.String()}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.reason, diff)
		}
	}
}

func TestBusyboxImage(t *testing.T) {
	tests := []struct {
		reason, image string
		want          bool
	}{
		{"the operator's default", "busybox:1.28.0-glibc", true},
		{"spec.pod.busyboxImage from a mirror", "registry.example.com/library/busybox:1.36", true},
		{"by digest", "busybox@sha256:0123", true},
		{"an etcd image", "quay.io/coreos/etcd:v3.6.16", false},
		{"a name that only starts like it", "busybox-extras:1.0", false},
	}
	for _, tt := range tests {
		if got := busyboxImage(tt.image); got != tt.want {
			t.Errorf("%s: busyboxImage(%q) = %v, want %v", tt.reason, tt.image, got, tt.want)
		}
	}
}

// TestCheckDNSContainer runs the emulated check-dns as the kubelet does,
// a process asking the harness DNS server: it lets the Pod start once its
// name resolves; with TIMEOUT_READY it fails the Pod (restartPolicy
// Never) after that many lookups, saying so on stdout; another busybox
// script is a container config error.
func TestCheckDNSContainer(t *testing.T) {
	requireEtcd(t, "3.6.16")
	env, _ := newEnvWithFake(t, Options{})
	app := []corev1.Container{{Name: "app", Image: "quay.io/coreos/etcd:v3.6.16", Command: []string{"/usr/local/bin/etcdctl", "version"}}}
	pod := func(name, script string) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				Hostname: name, Subdomain: "dns",
				RestartPolicy:  corev1.RestartPolicyNever,
				InitContainers: []corev1.Container{{Name: "check-dns", Image: CoreOSBusyboxImage, Command: []string{"/bin/sh", "-c", script}}},
				Containers:     app,
			},
		}
	}
	createPod(t, env, pod("resolves", coreosCheckDNSScript(0, "resolves.dns.default.svc")))
	createPod(t, env, pod("times-out", coreosCheckDNSScript(2, "nobody.dns.default.svc")))
	createPod(t, env, pod("other-script", "nslookup other-script.dns.default.svc"))

	type outcome struct {
		Phase       corev1.PodPhase
		InitExit    int32
		InitWaiting string
	}
	result := func(name string) outcome {
		st := podStatus(env, name)
		o := outcome{Phase: st.Phase, InitExit: -1}
		if len(st.InitContainerStatuses) == 1 {
			s := st.InitContainerStatuses[0].State
			if s.Terminated != nil {
				o.InitExit = s.Terminated.ExitCode
			}
			if s.Waiting != nil {
				o.InitWaiting = s.Waiting.Reason
			}
		}
		return o
	}
	tests := []struct {
		reason, pod string
		want        outcome
		log         []string
	}{
		{
			reason: "its own name resolves as soon as it has an IP: exit 0, the app runs to completion",
			pod:    "resolves", want: outcome{Phase: corev1.PodSucceeded, InitExit: 0},
			log: []string{"Name:      resolves.dns.default.svc"},
		},
		{
			reason: "TIMEOUT_READY=2 and a name nobody has: exit 1, the Pod fails",
			pod:    "times-out", want: outcome{Phase: corev1.PodFailed, InitExit: 1},
			log: []string{"nslookup: can't resolve 'nobody.dns.default.svc'", "Timed out waiting for DNS entry"},
		},
		{
			reason: "any other busybox script: not run, a container config error",
			pod:    "other-script", want: outcome{Phase: corev1.PodPending, InitExit: -1, InitWaiting: "CreateContainerConfigError"},
		},
	}
	for _, tt := range tests {
		err := env.WaitFor(20*time.Second, tt.pod+" settled", func() (bool, string) {
			got := result(tt.pod)
			return got == tt.want, fmt.Sprintf("%+v", got)
		})
		if err != nil {
			t.Errorf("%s: %v", tt.reason, err)
			continue
		}
		data, _ := os.ReadFile(env.Kubelet.ContainerLog(ns, tt.pod, "check-dns"))
		for _, want := range tt.log {
			if !strings.Contains(string(data), want) {
				t.Errorf("%s: the check-dns log lacks %q:\n%s", tt.reason, want, data)
			}
		}
	}
	// Two lookups a second apart: the failing run took a second at least.
	st := podStatus(env, "times-out").InitContainerStatuses[0].State.Terminated
	if d := st.FinishedAt.Sub(st.StartedAt.Time); d < time.Second {
		t.Errorf("TIMEOUT_READY=2 gave up after %s, want a second between its two lookups", d)
	}
	if n := strings.Count(string(must(os.ReadFile(env.Kubelet.ContainerLog(ns, "times-out", "check-dns")))), "can't resolve"); n != 2 {
		t.Errorf("TIMEOUT_READY=2 looked up %d times, want 2", n)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
