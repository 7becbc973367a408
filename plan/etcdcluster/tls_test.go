package etcdcluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// The CoreOS example's Secret names.
const (
	peerSecret     = "etcd-peer-tls"
	serverSecret   = "etcd-server-tls"
	operatorSecret = "etcd-client-tls"
)

func tlsCluster(size int) *v1beta2.EtcdCluster {
	c := newCluster(size, "3.6.16")
	c.Spec.TLS = &v1beta2.TLSPolicy{Static: &v1beta2.StaticTLS{
		Member:         &v1beta2.MemberSecret{PeerSecret: peerSecret, ServerSecret: serverSecret},
		OperatorSecret: operatorSecret,
	}}
	return c
}

func secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name), ResourceVersion: "1"}, Data: data}
}

// issued are valid Secrets for the test cluster, issued once per run.
func issued(t testing.TB) map[string]*corev1.Secret {
	t.Helper()
	ca, err := tlstest.NewCA("test ca")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ca.IssueCluster(testCluster, testNS, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Secret{
		peerSecret: secret(peerSecret, s.Peer), serverSecret: secret(serverSecret, s.Server), operatorSecret: secret(operatorSecret, s.Client),
	}
	for name, sec := range out {
		// Each issue is another Secret to the planner, which remembers
		// what it parsed by UID and resourceVersion.
		sec.UID = types.UID(fmt.Sprintf("uid-%s-%d", name, secretVersions.Add(1)))
	}
	return out
}

func withSecrets(o *Observed, secrets map[string]*corev1.Secret) *Observed {
	o.Secrets = secrets
	return o
}

func TestTLSSeedPod(t *testing.T) {
	d := Plan(withSecrets(observed(tlsCluster(3)), issued(t)))
	seed := SeedName(testCluster, testUID)
	pod := renderedPod(d.Children, seed)
	if pod == nil {
		t.Fatalf("no seed Pod in %v (status %+v)", childNames(d.Children), d.Status.Conditions)
	}
	ctr := pod.Spec.Containers[0]
	host := seed + ".demo.prod.svc"
	want := []string{
		"/usr/local/bin/etcd",
		"--name=" + seed,
		"--data-dir=/var/etcd/data",
		"--listen-client-urls=https://0.0.0.0:2379",
		"--listen-peer-urls=https://0.0.0.0:2380",
		"--advertise-client-urls=https://" + host + ":2379",
		"--initial-advertise-peer-urls=https://" + host + ":2380",
		"--initial-cluster=" + seed + "=https://" + host + ":2380",
		"--initial-cluster-state=new",
		"--initial-cluster-token=demo-" + testUID,
		"--listen-metrics-urls=http://0.0.0.0:2381",
		"--quota-backend-bytes=2147483648",
		"--auto-compaction-mode=periodic",
		"--auto-compaction-retention=1h",
		"--peer-client-cert-auth=true",
		"--peer-cert-file=/etc/etcdtls/member/peer-tls/peer.crt",
		"--peer-key-file=/etc/etcdtls/member/peer-tls/peer.key",
		"--peer-trusted-ca-file=/etc/etcdtls/member/peer-tls/peer-ca.crt",
		"--client-cert-auth=true",
		"--cert-file=/etc/etcdtls/member/server-tls/server.crt",
		"--key-file=/etc/etcdtls/member/server-tls/server.key",
		"--trusted-ca-file=/etc/etcdtls/member/server-tls/server-ca.crt",
	}
	if diff := cmp.Diff(want, ctr.Command); diff != "" {
		t.Errorf("seed command (-want +got):\n%s", diff)
	}
	wantMounts := []corev1.VolumeMount{
		{Name: dataVolume, MountPath: dataMount},
		{Name: peerTLSVolume, MountPath: peerTLSDir, ReadOnly: true},
		{Name: serverTLSVolume, MountPath: serverTLSDir, ReadOnly: true},
	}
	if diff := cmp.Diff(wantMounts, ctr.VolumeMounts); diff != "" {
		t.Errorf("mounts (-want +got); whole Secrets, never subPath, so that rotation reaches etcd:\n%s", diff)
	}
	secrets := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	if diff := cmp.Diff(map[string]string{peerTLSVolume: peerSecret, serverTLSVolume: serverSecret}, secrets); diff != "" {
		t.Errorf("Secret volumes (-want +got); the operator's Secret is the hook's, never a member's:\n%s", diff)
	}
	wantProbe := &corev1.HTTPGetAction{Path: "/health?serializable=true&exclude=NOSPACE", Port: intstr.FromInt32(MetricsPort), Scheme: corev1.URISchemeHTTP}
	if diff := cmp.Diff(wantProbe, ctr.ReadinessProbe.HTTPGet); diff != "" {
		t.Errorf("readiness probe (-want +got); the client port asks for a certificate the kubelet does not have:\n%s", diff)
	}
	if got := MemberClientURL(tlsCluster(3), pod); got != "https://"+host+":2379" {
		t.Errorf("MemberClientURL = %q, want the https URL the Pod advertises", got)
	}
}

func TestTLSPeerOnly(t *testing.T) {
	c := tlsCluster(1)
	c.Spec.TLS.Static.Member.ServerSecret, c.Spec.TLS.Static.OperatorSecret = "", ""
	secrets := issued(t)
	d := Plan(withSecrets(observed(c), map[string]*corev1.Secret{peerSecret: secrets[peerSecret]}))
	pod := renderedPod(d.Children, SeedName(testCluster, testUID))
	if pod == nil {
		t.Fatalf("no seed Pod: %+v", d.Status.Conditions)
	}
	cmd := strings.Join(pod.Spec.Containers[0].Command, " ")
	for _, want := range []string{"--listen-peer-urls=https://", "--listen-client-urls=http://", "--advertise-client-urls=http://", "--peer-client-cert-auth=true"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command lacks %q: %s", want, cmd)
		}
	}
	if strings.Contains(cmd, "--client-cert-auth") {
		t.Errorf("a peer-only policy asks clients for certificates: %s", cmd)
	}
}

func TestTLSSecretProblemsFreezeTheCluster(t *testing.T) {
	good := issued(t)
	other, err := tlstest.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	wrongNames, err := other.IssueCluster("another-cluster", testNS, "")
	if err != nil {
		t.Fatal(err)
	}
	expiredLeaf, err := other.Issue(tlstest.LeafOptions{CommonName: "old", DNSNames: []string{"*.demo.prod.svc"}, Usage: tlstest.Server | tlstest.Client, Lifetime: -(time.Since(testNow) + time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	edits := 0
	edit := func(name string, f func(map[string][]byte)) map[string]*corev1.Secret {
		out := map[string]*corev1.Secret{}
		for n, s := range good {
			cp := s.DeepCopy()
			if n == name {
				// A new version, as the API server gives every update.
				edits++
				cp.ResourceVersion = fmt.Sprint(1 + edits)
				f(cp.Data)
			}
			out[n] = cp
		}
		return out
	}
	without := func(name string) map[string]*corev1.Secret {
		out := edit("", nil)
		delete(out, name)
		return out
	}
	tests := []struct {
		name    string
		secrets map[string]*corev1.Secret
		want    []string // in the message
		reason  string
	}{
		{"missing Secret", without(serverSecret), []string{`Secret "etcd-server-tls"`, "spec.TLS.static.member.serverSecret", "not found"},
			"a member would wait in ContainerCreating, and say so nowhere the hook sees"},
		{"missing key", edit(peerSecret, func(d map[string][]byte) { delete(d, "peer-ca.crt") }), []string{`Secret "etcd-peer-tls"`, `lacks key "peer-ca.crt"`},
			"etcd would exit at start"},
		{"certificate that does not parse", edit(operatorSecret, func(d map[string][]byte) {
			d["etcd-client.crt"] = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
		}),
			[]string{`Secret "etcd-client-tls"`, `key "etcd-client.crt"`, "does not parse"}, "the hook could not call the members"},
		{"key of another certificate", edit(serverSecret, func(d map[string][]byte) { d["server.key"] = good[peerSecret].Data["peer.key"] }),
			[]string{`Secret "etcd-server-tls"`, `key "server.key" does not hold the private key of "server.crt"`}, "etcd would exit at start"},
		{"CA that is no PEM", edit(serverSecret, func(d map[string][]byte) { d["server-ca.crt"] = []byte("not pem") }),
			[]string{`Secret "etcd-server-tls"`, `key "server-ca.crt" holds no PEM certificate`}, "etcd would trust no client"},
		{"certificate for another cluster", edit(peerSecret, func(d map[string][]byte) {
			d["peer.crt"], d["peer.key"] = wrongNames.Peer["peer.crt"], wrongNames.Peer["peer.key"]
		}),
			[]string{`Secret "etcd-peer-tls"`, `key "peer.crt"`, "does not name the members", "*.demo.prod.svc"}, "members would refuse each other"},
		{"expired certificate", edit(serverSecret, func(d map[string][]byte) { d["server.crt"], d["server.key"] = expiredLeaf.CertPEM, expiredLeaf.KeyPEM }),
			[]string{`Secret "etcd-server-tls"`, `key "server.crt"`, "expired"}, "every handshake would fail"},
	}
	running := func() *Observed {
		c := tlsCluster(3)
		c.Status.Phase = v1beta2.PhaseRunning
		pods := []*corev1.Pod{readyPod(name(0)), readyPod(name(1))}
		for _, p := range pods {
			addTLS(p, c.TLSSecrets())
		}
		o := observed(c, pods...)
		o.Membership = memberList(1, member(1, name(0)), member(2, name(1)))
		return o
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fresh := Plan(withSecrets(observed(tlsCluster(3)), tc.secrets))
			if len(fresh.Children) != 0 {
				t.Errorf("a new cluster is created half-way: %v", childNames(fresh.Children))
			}
			deg := conditionOf(fresh.Status, v1beta2.ConditionDegraded)
			if deg.Reason != ReasonTLSSecretInvalid {
				t.Errorf("Degraded reason %q, want %q", deg.Reason, ReasonTLSSecretInvalid)
			}
			for _, w := range tc.want {
				if !strings.Contains(deg.Message, w) {
					t.Errorf("message %q lacks %q: %s", deg.Message, w, tc.reason)
				}
			}

			d := Plan(withSecrets(running(), tc.secrets))
			if d.Action != nil {
				t.Errorf("a running cluster is changed: %v", d.Action)
			}
			if diff := cmp.Diff([]string{name(0), name(1)}, podsIn(d.Children)); diff != "" {
				t.Errorf("a running cluster loses or gains members (-want +got):\n%s", diff)
			}
			if got := conditionOf(d.Status, v1beta2.ConditionDegraded).Reason; got != ReasonTLSSecretInvalid {
				t.Errorf("running: Degraded reason %q, want %q", got, ReasonTLSSecretInvalid)
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		d := Plan(withSecrets(running(), good))
		if d.Action == nil || d.Action.Type != membership.ActionAddMember {
			t.Errorf("with valid Secrets the cluster of 2 grows to 3; action %v, status %+v", d.Action, d.Status.Conditions)
		}
		if !strings.HasPrefix(d.Action.PeerURL, "https://") {
			t.Errorf("new member's peer URL %q is not https", d.Action.PeerURL)
		}
	})
}

func TestTLSChangeIsRefused(t *testing.T) {
	secrets := issued(t)
	plainPods := func() []*corev1.Pod { return []*corev1.Pod{readyPod(name(0)), readyPod(name(1))} }
	tlsPods := func(policy *v1beta2.TLSPolicy) []*corev1.Pod {
		pods := plainPods()
		for _, p := range pods {
			addTLS(p, (&v1beta2.EtcdCluster{Spec: v1beta2.ClusterSpec{TLS: policy}}).TLSSecrets())
		}
		return pods
	}
	renamed := tlsCluster(3).Spec.TLS
	renamed.Static.Member.PeerSecret = "etcd-peer-tls-2"
	tests := []struct {
		name   string
		spec   *v1beta2.TLSPolicy
		pods   []*corev1.Pod
		want   []string
		reason string
	}{
		{"turned on", tlsCluster(3).Spec.TLS, plainPods(), []string{"serves plain HTTP", "cannot be turned on", "Remove spec.TLS"},
			"members that serve plain HTTP and new ones that serve TLS cannot talk; the hook would lose them"},
		{"turned on with auto", &v1beta2.TLSPolicy{Auto: &v1beta2.AutoTLS{}}, plainPods(), []string{"serves plain HTTP", "cannot be turned on", "Remove spec.TLS"},
			"spec.TLS.auto on a running plain cluster is the same switch: no member moves, whatever issues the certificates"},
		{"turned off", nil, tlsPods(tlsCluster(3).Spec.TLS), []string{`peers with Secret "etcd-peer-tls"`, "cannot be turned off"},
			"the hook would have no certificate to call the members with"},
		{"Secret swapped", renamed, tlsPods(tlsCluster(3).Spec.TLS), []string{`Secret "etcd-peer-tls-2"`, "cannot be swapped", "updating the Secrets in place"},
			"a new member would trust another CA than the running ones"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(3, "3.6.16")
			c.Spec.TLS = tc.spec
			c.Status.Phase = v1beta2.PhaseRunning
			o := withSecrets(observed(c, tc.pods...), secrets)
			o.Membership = memberList(1, member(1, name(0)), member(2, name(1)))
			d := Plan(o)
			if d.Action != nil {
				t.Errorf("the cluster is changed (%v): %s", d.Action, tc.reason)
			}
			if diff := cmp.Diff([]string{name(0), name(1)}, podsIn(d.Children)); diff != "" {
				t.Errorf("members (-want +got):\n%s", diff)
			}
			if s := childrenOf(d.Children, plan.KindSecret); len(s) > 0 {
				t.Errorf("Secrets %v rendered for a refused change: %s", s, tc.reason)
			}
			deg := conditionOf(d.Status, v1beta2.ConditionDegraded)
			if deg.Reason != ReasonTLSChangeRefused {
				t.Errorf("Degraded reason %q, want %q (%s)", deg.Reason, ReasonTLSChangeRefused, deg.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(deg.Message, w) {
					t.Errorf("message %q lacks %q", deg.Message, w)
				}
			}
		})
	}
}

func TestRelatedNamesTheTLSSecrets(t *testing.T) {
	got := Related(tlsCluster(3))
	want := plan.RelatedResource{APIVersion: "v1", Resource: "secrets", Namespace: testNS, Names: []string{peerSecret, serverSecret, operatorSecret}}
	if diff := cmp.Diff(want, got[len(got)-1]); diff != "" {
		t.Errorf("Secrets rule (-want +got):\n%s", diff)
	}
	for _, r := range Related(newCluster(3, "")) {
		if r.Resource == "secrets" {
			t.Errorf("a plain cluster relates Secrets: %+v; Metacontroller would cache them for nothing", r)
		}
	}
}

// A steady sync parses no certificate: the check of a Secret's version is
// remembered. Until the leaf expires: the same version checked after its
// expiry is reported expired.
func TestTLSSecretCheckIsRememberedUntilExpiry(t *testing.T) {
	good := issued(t)
	secret := good[operatorSecret].DeepCopy()
	secret.UID, secret.ResourceVersion = "memo-test", "7"
	if msg := plan.CheckTLSSecret(secret, plan.OperatorKeys, nil, testNow); msg != "" {
		t.Fatalf("valid Secret: %s", msg)
	}
	// Same version, other bytes: the memo answers, as the API server never
	// changes bytes without a new resourceVersion.
	secret.Data["etcd-client.crt"] = []byte("garbage")
	if msg := plan.CheckTLSSecret(secret, plan.OperatorKeys, nil, testNow); msg != "" {
		t.Errorf("the remembered check was not used: %s", msg)
	}
	secret.Data = good[operatorSecret].DeepCopy().Data
	if msg := plan.CheckTLSSecret(secret, plan.OperatorKeys, nil, testNow.Add(10*365*24*time.Hour)); !strings.Contains(msg, "expired") {
		t.Errorf("after the leaf's expiry: %q, want it reported expired", msg)
	}
}
