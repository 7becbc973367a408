package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// TestEveryLineTakesTheRenderedCommand starts each pinned release line
// with the exact command line and environment the hook renders, for every
// spec option that reaches them: TLS for peers and clients, the quota,
// both compaction modes, a setting given as an ETCD_* variable instead of
// the flag, the metrics URL and the readiness probe. etcd refuses to start
// on a flag it does not know (3.7 dropped every --experimental-* one), and
// on a flag given twice (flag and variable): either shows here as a member
// that never becomes ready, or restarts.
func TestEveryLineTakesTheRenderedCommand(t *testing.T) {
	lines := []string{etcdtest.Version35, etcdtest.Version36, etcdtest.Version37}
	for _, v := range lines {
		testenv.Binary(t, testenv.Etcd(v))
	}
	env := harness.New(t, harness.Options{ClusterCustomize: true})
	ca, err := tlstest.NewCA("flags ca")
	if err != nil {
		t.Fatal(err)
	}
	app, err := ca.ClientPair("app")
	if err != nil {
		t.Fatal(err)
	}
	appTLS := ca.ClientConfig(app)

	const quota = 64 << 20
	type variant struct {
		name string
		spec map[string]any
		// flags must each be on the started command line, as name=value
		// or a bare name.
		flags []string
		// absent must not be: the setting is given by its variable.
		absent []string
		env    []string
	}
	var variants []variant
	for _, v := range lines {
		line := strings.ReplaceAll(lineOf(v), ".", "")
		plain := fmt.Sprintf("flags-%s-plain", line)
		variants = append(variants, variant{
			name: plain,
			spec: map[string]any{"size": 1, "version": v,
				"etcd":         map[string]any{"quotaBackendBytes": quota, "autoCompactionMode": "revision", "autoCompactionRetention": "1000"},
				"housekeeping": map[string]any{"recoverNoSpace": true, "defragment": true},
				"pod": map[string]any{"etcdEnv": []any{
					map[string]any{"name": "ETCD_AUTO_COMPACTION_RETENTION", "value": "2000"},
					map[string]any{"name": "ETCD_SNAPSHOT_COUNT", "value": "20000"},
				}},
			},
			flags:  []string{fmt.Sprintf("--quota-backend-bytes=%d", quota), "--auto-compaction-mode=revision", "--listen-metrics-urls"},
			absent: []string{"--auto-compaction-retention"},
			env:    []string{"ETCD_AUTO_COMPACTION_RETENTION=2000", "ETCD_SNAPSHOT_COUNT=20000"},
		})
		secure := fmt.Sprintf("flags-%s-tls", line)
		secrets, err := ca.IssueCluster(secure, ns, "")
		if err != nil {
			t.Fatal(err)
		}
		putSecret(t, env, secure+"-peer", secrets.Peer)
		putSecret(t, env, secure+"-server", secrets.Server)
		putSecret(t, env, secure+"-operator", secrets.Client)
		t.Cleanup(UseClientTLS(secure, ns, appTLS))
		variants = append(variants, variant{
			name: secure,
			spec: map[string]any{"size": 1, "version": v,
				"etcd": map[string]any{"autoCompactionMode": "periodic", "autoCompactionRetention": "30m"},
				"TLS": map[string]any{"static": map[string]any{
					"member":         map[string]any{"peerSecret": secure + "-peer", "serverSecret": secure + "-server"},
					"operatorSecret": secure + "-operator",
				}},
			},
			flags: []string{"--peer-cert-file", "--peer-key-file", "--peer-trusted-ca-file", "--peer-client-cert-auth",
				"--cert-file", "--key-file", "--trusted-ca-file", "--client-cert-auth",
				"--auto-compaction-mode=periodic", "--auto-compaction-retention=30m", "--listen-metrics-urls"},
		})
	}
	for _, v := range variants {
		if _, err := env.MC.CreateParent(ns, v.name, v.spec); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			c := &Cluster{Env: env, Namespace: ns, Name: v.name}
			if _, members, err := c.WaitConverged(convergeTimeout, 1); err != nil {
				t.Fatalf("never ready on the rendered command line: %v", err)
			} else {
				t.Logf("converged: %s", members)
			}
			pod := c.Pods()[0]
			if pod.Restarts != 0 {
				t.Errorf("etcd restarted %d times: it refused the rendered command line at least once", pod.Restarts)
			}
			args, environ := processOf(t, env, pod.Name)
			for _, f := range v.flags {
				if !slices.ContainsFunc(args, func(a string) bool { return a == f || strings.HasPrefix(a, f+"=") }) {
					t.Errorf("started without %s: %q", f, args)
				}
			}
			for _, f := range v.absent {
				if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, f+"=") }) {
					t.Errorf("started with %s although spec.pod.etcdEnv sets its variable: %q", f, args)
				}
			}
			for _, e := range v.env {
				if !slices.Contains(environ, e) {
					t.Errorf("started without %s in its environment", e)
				}
			}
			// The metrics URL serves without a client certificate, which
			// is what Prometheus and the kubelet's probe have.
			client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
			resp, err := client.Get(fmt.Sprintf("http://%s:2381/metrics", pod.IP))
			if err != nil {
				t.Errorf("metrics URL: %v", err)
			} else if resp.Body.Close(); resp.StatusCode != http.StatusOK {
				t.Errorf("metrics URL: HTTP %d", resp.StatusCode)
			}
			// etcd took the quota (Status reports it from 3.6 on).
			cli, err := NewClient(c.MemberURL(pod.Name))
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(env.Ctx(), 5*time.Second)
			defer cancel()
			if _, err := cli.Put(ctx, "/flags", v.name); err != nil {
				t.Errorf("put: %v", err)
			}
			st, err := cli.Status(ctx, c.MemberURL(pod.Name))
			if err != nil {
				t.Fatal(err)
			}
			if want, ok := v.spec["etcd"].(map[string]any)["quotaBackendBytes"]; ok && st.DbSizeQuota != 0 && st.DbSizeQuota != int64(want.(int)) {
				t.Errorf("etcd runs with a quota of %d bytes, want %d", st.DbSizeQuota, want)
			}
			if !strings.HasPrefix(st.Version, lineOf(v.spec["version"].(string))+".") {
				t.Errorf("etcd reports %s, want the %s line", st.Version, v.spec["version"])
			}
		})
	}
}

// processOf is the command line and environment of the member Pod's
// running etcd, as the kernel has them.
func processOf(t *testing.T, env *harness.Env, pod string) (args, environ []string) {
	t.Helper()
	pid, err := env.Kubelet.ContainerPID(ns, pod, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) []string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
	}
	return read("cmdline")[1:], read("environ")
}
