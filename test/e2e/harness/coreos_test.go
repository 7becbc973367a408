package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var coreosOwner = OwnerRef{APIVersion: "etcd.database.coreos.com/v1beta2", Kind: "EtcdCluster", Name: "example", UID: "uid-1", Controller: true}

// coreosPodHeadJSON is what every member Pod of v0.9.4 shares up to its
// containers, for the member example-bcdfghjklm of the cluster example:
// its metadata and the check-dns init container.
const coreosPodHeadJSON = `{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {
    "name": "example-bcdfghjklm", "namespace": "default",
    "annotations": {"etcd.version": "3.6.16"},
    "labels": {"app": "etcd", "etcd_cluster": "example", "etcd_node": "example-bcdfghjklm"},
    "ownerReferences": [{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster", "name": "example", "uid": "uid-1", "controller": true}]
  },
  "spec": {
    "automountServiceAccountToken": false,
    "hostname": "example-bcdfghjklm",
    "subdomain": "example",
    "restartPolicy": "Never",
    "initContainers": [{
      "name": "check-dns", "image": "busybox:1.28.0-glibc", "resources": {},
      "command": ["/bin/sh", "-c", "\n\t\t\t\t\tTIMEOUT_READY=0\n\t\t\t\t\twhile ( ! nslookup example-bcdfghjklm.example.default.svc )\n\t\t\t\t\tdo\n\t\t\t\t\t\t# If TIMEOUT_READY is 0 we should never time out and exit \n\t\t\t\t\t\tTIMEOUT_READY=$(( TIMEOUT_READY-1 ))\n                        if [ $TIMEOUT_READY -eq 0 ];\n\t\t\t\t        then\n\t\t\t\t            echo \"Timed out waiting for DNS entry\"\n\t\t\t\t            exit 1\n\t\t\t\t        fi\n\t\t\t\t\t\tsleep 1\n\t\t\t\t\tdone"]
    }],
`

// coreosPodJSON is a member Pod of v0.9.4 as newEtcdPod renders it, written
// out from the source; %s are the parts the cases change.
const coreosPodJSON = coreosPodHeadJSON + `    "containers": [{
      "name": "etcd", "image": "quay.io/coreos/etcd:v3.6.16", "resources": {},
      "command": ["/usr/local/bin/etcd", "--data-dir=/var/etcd/data", "--name=example-bcdfghjklm",
        "--initial-advertise-peer-urls=http://example-bcdfghjklm.example.default.svc:2380",
        "--listen-peer-urls=http://0.0.0.0:2380", "--listen-client-urls=http://0.0.0.0:2379",
        "--advertise-client-urls=http://example-bcdfghjklm.example.default.svc:2379",
        %s],
      "ports": [{"name": "server", "containerPort": 2380, "protocol": "TCP"}, {"name": "client", "containerPort": 2379, "protocol": "TCP"}],
      "volumeMounts": [{"name": "etcd-data", "mountPath": "/var/etcd"}],
      "livenessProbe": {"exec": {"command": ["/bin/sh", "-ec", "ETCDCTL_API=3 etcdctl endpoint status"]},
        "initialDelaySeconds": 10, "timeoutSeconds": 10, "periodSeconds": 60, "failureThreshold": 3},
      "readinessProbe": {"exec": {"command": ["/bin/sh", "-ec", "ETCDCTL_API=3 etcdctl endpoint status"]},
        "initialDelaySeconds": 1, "timeoutSeconds": 5, "periodSeconds": 5, "failureThreshold": 3}
    }],
    "volumes": [%s]
  }
}`

func TestCoreOSMemberPod(t *testing.T) {
	const member, other = "example-bcdfghjklm", "example-2456789bcd"
	tests := []struct {
		reason         string
		version        string
		initialCluster []string
		state, claim   string
		flags, volume  string
	}{
		{
			reason: "the seed: state new with the token, on an emptyDir", version: "3.6.16",
			initialCluster: []string{CoreOSPeerURLPair("default", member)}, state: "new",
			flags:  `"--initial-cluster=example-bcdfghjklm=http://example-bcdfghjklm.example.default.svc:2380", "--initial-cluster-state=new", "--initial-cluster-token=tok"`,
			volume: `{"name": "etcd-data", "emptyDir": {}}`,
		},
		{
			reason:  "a member added later, on its claim: state existing, no token, every member in --initial-cluster; a v in the version dropped",
			version: "v3.6.16", initialCluster: []string{CoreOSPeerURLPair("default", other), CoreOSPeerURLPair("default", member)},
			state: "existing", claim: member,
			flags:  `"--initial-cluster=example-2456789bcd=http://example-2456789bcd.example.default.svc:2380,example-bcdfghjklm=http://example-bcdfghjklm.example.default.svc:2380", "--initial-cluster-state=existing"`,
			volume: `{"name": "etcd-data", "persistentVolumeClaim": {"claimName": "example-bcdfghjklm"}}`,
		},
	}
	for _, tt := range tests {
		want := obj(fmt.Sprintf(coreosPodJSON, tt.flags, tt.volume))
		got := CoreOSMemberPod("example", "default", member, tt.version, tt.initialCluster, tt.state, "tok", coreosOwner, tt.claim)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.reason, diff)
		}
	}
}

// TestCoreOSTLSMemberPod: a member of a cluster with spec.TLS.static, as
// newEtcdPod rendered it with SecurePeer and SecureClient, written out from
// the source: https URLs, the certificate flags before the token, the
// Secrets mounted after etcd-data and listed before it, the TLS probe.
func TestCoreOSTLSMemberPod(t *testing.T) {
	const member = "example-bcdfghjklm"
	probe := `{"exec": {"command": ["/bin/sh", "-ec", "ETCDCTL_API=3 etcdctl --endpoints=https://localhost:2379 --cert=/etc/etcdtls/operator/etcd-tls/etcd-client.crt --key=/etc/etcdtls/operator/etcd-tls/etcd-client.key --cacert=/etc/etcdtls/operator/etcd-tls/etcd-client-ca.crt endpoint status"]}, `
	want := obj(coreosPodHeadJSON + `    "containers": [{
      "name": "etcd", "image": "quay.io/coreos/etcd:v3.6.16", "resources": {},
      "command": ["/usr/local/bin/etcd", "--data-dir=/var/etcd/data", "--name=example-bcdfghjklm",
        "--initial-advertise-peer-urls=https://example-bcdfghjklm.example.default.svc:2380",
        "--listen-peer-urls=https://0.0.0.0:2380", "--listen-client-urls=https://0.0.0.0:2379",
        "--advertise-client-urls=https://example-bcdfghjklm.example.default.svc:2379",
        "--initial-cluster=example-bcdfghjklm=https://example-bcdfghjklm.example.default.svc:2380", "--initial-cluster-state=new",
        "--peer-client-cert-auth=true", "--peer-trusted-ca-file=/etc/etcdtls/member/peer-tls/peer-ca.crt",
        "--peer-cert-file=/etc/etcdtls/member/peer-tls/peer.crt", "--peer-key-file=/etc/etcdtls/member/peer-tls/peer.key",
        "--client-cert-auth=true", "--trusted-ca-file=/etc/etcdtls/member/server-tls/server-ca.crt",
        "--cert-file=/etc/etcdtls/member/server-tls/server.crt", "--key-file=/etc/etcdtls/member/server-tls/server.key",
        "--initial-cluster-token=tok"],
      "ports": [{"name": "server", "containerPort": 2380, "protocol": "TCP"}, {"name": "client", "containerPort": 2379, "protocol": "TCP"}],
      "volumeMounts": [{"name": "etcd-data", "mountPath": "/var/etcd"},
        {"name": "member-peer-tls", "mountPath": "/etc/etcdtls/member/peer-tls"},
        {"name": "member-server-tls", "mountPath": "/etc/etcdtls/member/server-tls"},
        {"name": "etcd-client-tls", "mountPath": "/etc/etcdtls/operator/etcd-tls"}],
      "livenessProbe": ` + probe + `"initialDelaySeconds": 10, "timeoutSeconds": 10, "periodSeconds": 60, "failureThreshold": 3},
      "readinessProbe": ` + probe + `"initialDelaySeconds": 1, "timeoutSeconds": 5, "periodSeconds": 5, "failureThreshold": 3}
    }],
    "volumes": [
      {"name": "member-peer-tls", "secret": {"secretName": "etcd-peer-tls"}},
      {"name": "member-server-tls", "secret": {"secretName": "etcd-server-tls"}},
      {"name": "etcd-client-tls", "secret": {"secretName": "etcd-client-tls"}},
      {"name": "etcd-data", "emptyDir": {}}]
  }
}`)
	got := CoreOSTLSMemberPod("example", "default", member, "3.6.16", []string{CoreOSTLSPeerURLPair("default", member)}, "new", "tok", coreosOwner, "",
		CoreOSTLS{PeerSecret: "etcd-peer-tls", ServerSecret: "etcd-server-tls", OperatorSecret: "etcd-client-tls"})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the TLS seed (-want +got):\n%s", diff)
	}
}

func TestCoreOSServicesAndClaim(t *testing.T) {
	owner := `"ownerReferences": [{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster", "name": "example", "uid": "uid-1", "controller": true}]`
	meta := `"labels": {"app": "etcd", "etcd_cluster": "example"}, "annotations": {"service.alpha.kubernetes.io/tolerate-unready-endpoints": "true"}, ` + owner
	client := `{"name": "client", "port": 2379, "targetPort": 2379, "protocol": "TCP"}`
	selector := `"selector": {"app": "etcd", "etcd_cluster": "example"}`
	want := []Object{
		obj(`{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "example-client", "namespace": "default", ` + meta + `},
			"spec": {"ports": [` + client + `], ` + selector + `}}`),
		obj(`{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "example", "namespace": "default", ` + meta + `},
			"spec": {"clusterIP": "None", "ports": [` + client + `, {"name": "peer", "port": 2380, "targetPort": 2380, "protocol": "TCP"}], ` + selector + `}}`),
	}
	if diff := cmp.Diff(want, CoreOSServices("example", "default", coreosOwner)); diff != "" {
		t.Errorf("the client Service, then the headless one, both tolerating unready endpoints (-want +got):\n%s", diff)
	}
	spec := map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}
	wantClaim := obj(`{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "example-bcdfghjklm", "namespace": "default",
		"labels": {"app": "etcd", "etcd_cluster": "example"}, ` + owner + `},
		"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}`)
	if diff := cmp.Diff(wantClaim, CoreOSMemberClaim("example", "default", "example-bcdfghjklm", spec, coreosOwner)); diff != "" {
		t.Errorf("a member's claim, named after it, with the cluster's claim spec (-want +got):\n%s", diff)
	}
}

func TestCoreOSNames(t *testing.T) {
	name := CoreOSMemberName("example")
	if !regexp.MustCompile(`^example-[bcdfghjklmnpqrstvwxz2456789]{10}$`).MatchString(name) {
		t.Errorf("CoreOSMemberName = %q, want example-<10 of utilrand's characters>", name)
	}
	if long := CoreOSMemberName(string(bytes.Repeat([]byte("a"), 60))); len(long) != 63 {
		t.Errorf("a 60-character cluster gives a member name of %d characters, want 63", len(long))
	}
	tests := []struct {
		reason, got, want string
	}{
		{"Addr: the cluster is the member name up to its last dash", CoreOSMemberAddr("ns", "my-db-x2"), "my-db-x2.my-db.ns.svc"},
		{"the peer URL", CoreOSPeerURL("ns", "db-x2"), "http://db-x2.db.ns.svc:2380"},
		{"the client URL", CoreOSClientURL("ns", "db-x2"), "http://db-x2.db.ns.svc:2379"},
		{"an --initial-cluster pair", CoreOSPeerURLPair("ns", "db-x2"), "db-x2=http://db-x2.db.ns.svc:2380"},
		{"the peer URL with TLS", CoreOSTLSPeerURL("ns", "db-x2"), "https://db-x2.db.ns.svc:2380"},
		{"the client URL with TLS", CoreOSTLSClientURL("ns", "db-x2"), "https://db-x2.db.ns.svc:2379"},
		{"an --initial-cluster pair with TLS", CoreOSTLSPeerURLPair("ns", "db-x2"), "db-x2=https://db-x2.db.ns.svc:2380"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.reason, tt.got, tt.want)
		}
	}
}

// etcdCall posts a JSON body to etcd's gateway.
func etcdCall(ctx context.Context, endpoint, path string, body map[string]any) (map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+path, bytes.NewReader(mustJSON(body)))
	if err != nil {
		return nil, err
	}
	resp, err := plainHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d: %s %v", path, resp.StatusCode, data, err)
	}
	var out map[string]any
	return out, json.Unmarshal(data, &out)
}

// startedMembers lists the names of the members etcd reports started.
func startedMembers(ctx context.Context, endpoint string) ([]string, error) {
	out, err := etcdCall(ctx, endpoint, "/v3/cluster/member/list", map[string]any{})
	if err != nil {
		return nil, err
	}
	var names []string
	list, _ := out["members"].([]any)
	for _, m := range list {
		names = append(names, nestedString(m, "name"))
	}
	slices.Sort(names)
	return names, nil
}

// TestCoreOSCluster builds a two-member cluster the way the CoreOS
// operator did (the Services, a seed with state new, then MemberAdd and a
// Pod with state existing) and runs it: check-dns, etcd and the exec
// probes work, nothing restarts, and a member whose etcd dies stays dead
// in a Failed Pod (restartPolicy Never).
func TestCoreOSCluster(t *testing.T) {
	requireEtcd(t, "3.6.16")
	env, _ := newEnvWithFake(t, Options{})
	ctx := env.Ctx()
	const cluster = "example"
	for _, svc := range CoreOSServices(cluster, ns, coreosOwner) {
		mustCreate(t, env.API, svc)
	}
	seed, second := CoreOSMemberName(cluster), CoreOSMemberName(cluster)
	mustCreate(t, env.API, CoreOSMemberPod(cluster, ns, seed, "3.6.16", []string{CoreOSPeerURLPair(ns, seed)}, "new", "the-token", coreosOwner, ""))
	_, err := env.WaitPodReady(ns, seed, 30*time.Second)
	mustWait(t, err)
	if _, err := etcdCall(ctx, CoreOSClientURL(ns, seed), "/v3/cluster/member/add", map[string]any{"peerURLs": []string{CoreOSPeerURL(ns, second)}}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, env.API, CoreOSMemberPod(cluster, ns, second, "3.6.16",
		[]string{CoreOSPeerURLPair(ns, seed), CoreOSPeerURLPair(ns, second)}, "existing", "unused", coreosOwner, ""))
	_, err = env.WaitPodReady(ns, second, 30*time.Second)
	mustWait(t, err)
	if err := etcdPut(ctx, CoreOSClientURL(ns, second), "k", "v"); err != nil {
		t.Fatalf("a write through the member that joined: %v", err)
	}
	want := []string{seed, second}
	slices.Sort(want)
	if got, err := startedMembers(ctx, "http://"+cluster+"-client."+ns+".svc:2379"); err != nil || !slices.Equal(got, want) {
		t.Errorf("members through the client Service: %v, %v; want %v", got, err, want)
	}

	// The liveness probes (period 60 s, capped to 1 s here) pass: after a
	// few periods, still one run per container.
	time.Sleep(3 * time.Second)
	runs := map[string]int{}
	for _, r := range env.Kubelet.ContainerRuns() {
		runs[r.Pod+"/"+r.Container]++
	}
	wantRuns := map[string]int{seed + "/check-dns": 1, seed + "/etcd": 1, second + "/check-dns": 1, second + "/etcd": 1}
	if diff := cmp.Diff(wantRuns, runs); diff != "" {
		t.Errorf("container runs after the probes ran a while (-want +got):\n%s", diff)
	}
	for _, p := range []string{seed, second} {
		if pod, _ := env.Pod(ns, p); !podReady(pod) {
			t.Errorf("%s is no longer Ready: %s", p, PodSummary(pod))
		}
	}

	// restartPolicy Never: etcd killed is not restarted, the Pod fails.
	if err := env.Kubelet.KillContainer(ns, second, "etcd"); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(10*time.Second, second+" Failed", func() (bool, string) {
		p, _ := env.Pod(ns, second)
		return nestedString(p, "status", "phase") == "Failed", PodSummary(p)
	}))
	time.Sleep(time.Second)
	p, _ := env.Pod(ns, second)
	if n := restartCount(p); n != 0 || nestedString(p, "status", "phase") != "Failed" {
		t.Errorf("after kill -9 with restartPolicy Never: restartCount %d, %s; want 0 and Failed", n, PodSummary(p))
	}
}
