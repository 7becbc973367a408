package etcdcluster

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/pki"
	"github.com/etcdhook/etcd-hook/plan"
)

// autoCluster asks for spec.TLS.auto with a validity of 6 minutes renewed
// 4 minutes ahead: leaves are due 2 minutes after issue, CAs (12 minutes)
// after 8.
func autoCluster(size int, claims bool) *v1beta2.EtcdCluster {
	c := newCluster(size, "3.6.16")
	c.Spec.TLS = &v1beta2.TLSPolicy{Auto: &v1beta2.AutoTLS{
		Validity: &metav1.Duration{Duration: 6 * time.Minute}, RenewBefore: &metav1.Duration{Duration: 4 * time.Minute},
	}}
	if claims {
		c.Spec.Pod = &v1beta2.PodPolicy{PersistentVolumeClaimSpec: &corev1.PersistentVolumeClaimSpec{}}
	}
	return c
}

// secretsIn are the Secret children of an answer, by name.
func secretsIn(t testing.TB, d Decision) map[string]*corev1.Secret {
	t.Helper()
	out := map[string]*corev1.Secret{}
	for _, c := range d.Children {
		if c.Kind != plan.KindSecret {
			continue
		}
		s, ok := c.Object.(*corev1.Secret)
		if !ok {
			var kept corev1.Secret
			if err := json.Unmarshal(c.Object.(json.RawMessage), &kept); err != nil {
				t.Fatalf("Secret %s: %v", c.Name, err)
			}
			s = &kept
		}
		out[c.Name] = s
	}
	return out
}

// secretVersions makes UIDs and resourceVersions unique across tests, as
// the API server's are: the planner remembers parsed Secrets by them.
var secretVersions atomic.Int64

// applySecrets does what Metacontroller and the API server would: the
// answer's Secrets become the observed children, each with a UID and a
// resourceVersion that moves when its data does.
func applySecrets(t testing.TB, o *Observed, d Decision) {
	t.Helper()
	next := map[string]*corev1.Secret{}
	for name, s := range secretsIn(t, d) {
		s = s.DeepCopy()
		s.UID, s.ResourceVersion = types.UID(fmt.Sprintf("uid-%s-%d", name, secretVersions.Add(1))), "1"
		if prev, ok := o.SecretChildren[name]; ok {
			s.UID, s.ResourceVersion = prev.UID, prev.ResourceVersion
			if !cmp.Equal(prev.Data, s.Data) {
				s.ResourceVersion = fmt.Sprint(secretVersions.Add(1))
			}
		}
		next[name] = s
	}
	o.SecretChildren = next
}

func certOf(t testing.TB, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("no PEM certificate in %q", data)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verifies: the leaf under key chains to a CA of the bundle.
func verifies(t *testing.T, s *corev1.Secret, leafKey string, bundle []byte, usage x509.ExtKeyUsage, at time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatalf("empty bundle")
	}
	_, err := certOf(t, s.Data[leafKey]).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: at})
	return err
}

// leavesUnder checks the peer, server and operator leaves of an answer
// verify against the CAs of its CA Secret.
func leavesUnder(t *testing.T, got map[string]*corev1.Secret, ca *corev1.Secret, at time.Time, what string) {
	t.Helper()
	for _, tc := range []struct{ secret, key, caKey string }{
		{"demo-peer-tls", v1beta2.PeerCertKey, caPeerCert},
		{"demo-server-tls", v1beta2.ServerCertKey, caClientCert},
		{"demo-operator-tls", v1beta2.ClientCertKey, caClientCert},
	} {
		if err := verifies(t, got[tc.secret], tc.key, ca.Data[tc.caKey], x509.ExtKeyUsageClientAuth, at); err != nil {
			t.Errorf("%s %s: %v", tc.secret, what, err)
		}
	}
}

// issuedAuto runs the first two syncs of a new auto cluster: the CAs, then
// the leaves, each applied.
func issuedAuto(t testing.TB, c *v1beta2.EtcdCluster) *Observed {
	t.Helper()
	o := observed(c)
	for range 2 {
		applySecrets(t, o, Plan(o))
	}
	return o
}

func TestAutoTLSIssuesTheCAsFirst(t *testing.T) {
	o := observed(autoCluster(3, false))
	d := Plan(o)
	if diff := cmp.Diff([]string{"Secret/demo-ca"}, childNames(d.Children)); diff != "" {
		t.Fatalf("the first sync renders the CA Secret alone: no leaf is signed by a CA the API server does not hold yet, and no member starts without its Secrets (-want +got):\n%s", diff)
	}
	if got := conditionOf(d.Status, v1beta2.ConditionCertificatesReady); got.Status != metav1.ConditionFalse || got.Reason != ReasonCertificatesIssuing {
		t.Errorf("CertificatesReady = %+v, want False %s", got, ReasonCertificatesIssuing)
	}
	ca := secretsIn(t, d)["demo-ca"]
	for _, k := range []string{caPeerCert, caPeerKey, caClientCert, caClientKey} {
		if len(ca.Data[k]) == 0 {
			t.Errorf("the CA Secret lacks %q", k)
		}
	}
	if bytes.Equal(ca.Data[caPeerCert], ca.Data[caClientCert]) {
		t.Error("one CA for peers and clients: a client certificate would be accepted on the peer port")
	}

	applySecrets(t, o, d)
	d = Plan(o)
	got := secretsIn(t, d)
	if diff := cmp.Diff([]string{"demo-ca", "demo-operator-tls", "demo-peer-tls", "demo-server-tls"}, sorted(keysOf(got))); diff != "" {
		t.Fatalf("the second sync signs the leaves (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(o.SecretChildren["demo-ca"].Data, got["demo-ca"].Data); diff != "" {
		t.Errorf("the observed CA Secret must come back unchanged (-want +got):\n%s", diff)
	}
	if podsIn(d.Children) != nil {
		t.Errorf("members started before their Secrets exist: %v", podsIn(d.Children))
	}
	now := testNow.Add(time.Minute)
	for _, tc := range []struct {
		secret, key, caKey string
		usage              x509.ExtKeyUsage
		bundle             []byte
		reason             string
	}{
		{"demo-peer-tls", v1beta2.PeerCertKey, v1beta2.PeerCAKey, x509.ExtKeyUsageServerAuth, ca.Data[caPeerCert], "peers serve with it"},
		{"demo-peer-tls", v1beta2.PeerCertKey, v1beta2.PeerCAKey, x509.ExtKeyUsageClientAuth, ca.Data[caPeerCert], "and call each other with it"},
		{"demo-server-tls", v1beta2.ServerCertKey, v1beta2.ServerCAKey, x509.ExtKeyUsageServerAuth, ca.Data[caClientCert], "clients check members with the client CA"},
		{"demo-operator-tls", v1beta2.ClientCertKey, v1beta2.ClientCAKey, x509.ExtKeyUsageClientAuth, ca.Data[caClientCert], "members check the hook with the client CA"},
	} {
		s := got[tc.secret]
		if err := verifies(t, s, tc.key, tc.bundle, tc.usage, now); err != nil {
			t.Errorf("%s %s: %v (%s)", tc.secret, tc.key, err, tc.reason)
		}
		if !bytes.Equal(s.Data[tc.caKey], tc.bundle) {
			t.Errorf("%s %s is not the CA's certificate", tc.secret, tc.caKey)
		}
	}
	server := certOf(t, got["demo-server-tls"].Data[v1beta2.ServerCertKey])
	for _, host := range []string{"demo-m0.demo.prod.svc", "demo-m0.demo.prod.svc.cluster.local", "demo-client.prod.svc", "demo-client", "localhost", "127.0.0.1"} {
		if err := server.VerifyHostname(host); err != nil {
			t.Errorf("the server certificate does not name %s: %v", host, err)
		}
	}
	if op := certOf(t, got["demo-operator-tls"].Data[v1beta2.ClientCertKey]); op.Subject.CommonName != OperatorCommonName {
		t.Errorf("the operator certificate's CN is %q, want %q: etcd authentication takes it as the user", op.Subject.CommonName, OperatorCommonName)
	}
	if peer := certOf(t, got["demo-peer-tls"].Data[v1beta2.PeerCertKey]); slices.Contains(peer.DNSNames, "demo-client") {
		t.Error("the peer certificate names the client Service")
	}

	applySecrets(t, o, d)
	d = Plan(o)
	if diff := cmp.Diff(o.SecretChildren, secretsIn(t, d), cmp.Comparer(func(a, b *corev1.Secret) bool { return cmp.Equal(a.Data, b.Data) })); diff != "" {
		t.Errorf("once issued, every Secret comes back as observed (-want +got):\n%s", diff)
	}
	seed := renderedPod(d.Children, podsIn(d.Children)[0])
	if seed == nil {
		t.Fatalf("no seed member once the Secrets exist: %v", childNames(d.Children))
	}
	peerCA, _ := pki.Parse(o.SecretChildren["demo-ca"].Data[caPeerCert], nil)
	if got := seed.Annotations[AnnotationTrustedCA]; got != peerCA.Fingerprint() {
		t.Errorf("the seed's %s = %q, want the peer CA's fingerprint %q", AnnotationTrustedCA, got, peerCA.Fingerprint())
	}
	if got := observedPodTLS(seed); got != (podTLS{peer: "demo-peer-tls", server: "demo-server-tls"}) {
		t.Errorf("the seed mounts %s", got)
	}
	if !slices.ContainsFunc(seed.Spec.Containers[0].Command, func(s string) bool { return strings.HasPrefix(s, "--initial-advertise-peer-urls=https://") }) {
		t.Errorf("the seed does not serve its peers https: %v", seed.Spec.Containers[0].Command)
	}
	if got := conditionOf(d.Status, v1beta2.ConditionCertificatesReady); got.Status != metav1.ConditionTrue || got.Reason != ReasonCertificatesValid {
		t.Errorf("CertificatesReady = %+v, want True %s", got, ReasonCertificatesValid)
	}
	if st := d.Status.TLS; st == nil || len(st.Certificates) != 5 {
		t.Errorf("status.TLS = %+v, want the two CAs and three leaves", st)
	}
}

func TestAutoTLSNeverSignsWithAnUnobservedCA(t *testing.T) {
	// Two syncs that both see no CA (a lagging cache) make two CAs: the
	// API server keeps whichever create comes first. Neither answer holds
	// a leaf, so nothing is ever signed by the CA that lost.
	first, second := Plan(observed(autoCluster(3, false))), Plan(observed(autoCluster(3, false)))
	a, b := secretsIn(t, first)["demo-ca"], secretsIn(t, second)["demo-ca"]
	if bytes.Equal(a.Data[caPeerCert], b.Data[caPeerCert]) {
		t.Fatal("two syncs made the same CA: keys are not random")
	}
	if len(secretsIn(t, first)) != 1 || len(secretsIn(t, second)) != 1 {
		t.Fatalf("a sync that made a CA also rendered leaves: %v, %v", childNames(first.Children), childNames(second.Children))
	}
	o := observed(autoCluster(3, false))
	applySecrets(t, o, second) // the API server kept the second
	leaves := secretsIn(t, Plan(o))
	for _, name := range []string{"demo-peer-tls", "demo-server-tls"} {
		key := map[string]string{"demo-peer-tls": v1beta2.PeerCertKey, "demo-server-tls": v1beta2.ServerCertKey}[name]
		caKey := map[string]string{"demo-peer-tls": caPeerCert, "demo-server-tls": caClientCert}[name]
		if err := verifies(t, leaves[name], key, b.Data[caKey], x509.ExtKeyUsageServerAuth, testNow); err != nil {
			t.Errorf("%s is not signed by the CA the API server holds: %v", name, err)
		}
		if err := verifies(t, leaves[name], key, a.Data[caKey], x509.ExtKeyUsageServerAuth, testNow); err == nil {
			t.Errorf("%s is signed by the CA that was never stored", name)
		}
	}
}

// runningAuto is a running auto-TLS cluster of ready members on claims,
// m0 the leader, whose Pods were rendered with the current CA.
func runningAuto(t testing.TB, size int) *Observed { return runningAutoOn(t, size, true) }

// runningAutoOn is runningAuto, with the members' data on claims or not.
func runningAutoOn(t testing.TB, size int, claims bool) *Observed {
	t.Helper()
	c := autoCluster(size, claims)
	c.Status.Phase = v1beta2.PhaseRunning
	o := issuedAuto(t, c)
	o.Membership = memberList(1)
	peerCA, err := pki.Parse(o.SecretChildren["demo-ca"].Data[caPeerCert], nil)
	if err != nil {
		t.Fatal(err)
	}
	marker := peerCA.Fingerprint()
	for i := range size {
		pod := trusting(onSpec(readyPod(name(i)), c.Spec), marker)
		if claims {
			pod.Spec.Volumes = []corev1.Volume{{Name: dataVolume, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name(i)},
			}}}
			o.PVCs[name(i)] = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: testNS}}
		}
		addTLS(pod, c.TLSSecrets())
		o.Pods[name(i)] = pod
		o.Membership.Members = append(o.Membership.Members, member(uint64(i+1), name(i)))
	}
	return o
}

// trusting: the Pod was started trusting the CA of that fingerprint.
func trusting(p *corev1.Pod, fingerprint string) *corev1.Pod {
	p.Annotations[AnnotationTrustedCA] = fingerprint
	var applied map[string]any
	if err := json.Unmarshal([]byte(p.Annotations[plan.LastAppliedAnnotation]), &applied); err != nil {
		panic(err)
	}
	applied["metadata"].(map[string]any)["annotations"] = map[string]any{AnnotationPodSpecHash: p.Annotations[AnnotationPodSpecHash], AnnotationTrustedCA: fingerprint}
	raw, _ := json.Marshal(applied)
	p.Annotations[plan.LastAppliedAnnotation] = string(raw)
	return p
}

// renewThrough syncs once a minute until the moment, each answer's
// Secrets applied, as a cluster that nothing else happens to would be.
func renewThrough(t *testing.T, o *Observed, until time.Time) {
	t.Helper()
	for o.Now.Before(until) {
		o.Now = o.Now.Add(time.Minute)
		d := Plan(o)
		if d.Action != nil || len(podsIn(d.Children)) != len(o.Pods) {
			t.Fatalf("at %s the cluster moved: action %v, children %v", o.Now, d.Action, childNames(d.Children))
		}
		applySecrets(t, o, d)
	}
}

func TestAutoTLSRenewsLeavesInPlace(t *testing.T) {
	o := runningAuto(t, 3)
	steady := Plan(o)
	if steady.Action != nil || len(podsIn(steady.Children)) != 3 {
		t.Fatalf("the running cluster is not steady: action %v, children %v, status %+v", steady.Action, childNames(steady.Children), steady.Status.Conditions)
	}
	o.Now = testNow.Add(90 * time.Second)
	if got := Plan(o).ResyncAfter; got != 31*time.Second {
		t.Errorf("ResyncAfter = %s, want 31s: the leaves are due in 30s, sooner than Metacontroller's resync", got)
	}
	before := o.SecretChildren
	o.Now = testNow.Add(3 * time.Minute) // leaves due at +2m, the CAs at +8m
	d := Plan(o)
	got := secretsIn(t, d)
	if diff := cmp.Diff(before["demo-ca"].Data, got["demo-ca"].Data); diff != "" {
		t.Errorf("a leaf renewal changed the CAs (-want +got):\n%s", diff)
	}
	for _, tc := range []struct{ secret, key, caKey string }{
		{"demo-peer-tls", v1beta2.PeerCertKey, caPeerCert},
		{"demo-server-tls", v1beta2.ServerCertKey, caClientCert},
		{"demo-operator-tls", v1beta2.ClientCertKey, caClientCert},
	} {
		old, renewed := certOf(t, before[tc.secret].Data[tc.key]), certOf(t, got[tc.secret].Data[tc.key])
		if old.SerialNumber.Cmp(renewed.SerialNumber) == 0 {
			t.Errorf("%s was not renewed though due", tc.secret)
		}
		if want := o.Now.Add(6 * time.Minute).Truncate(time.Second); !renewed.NotAfter.Equal(want) {
			t.Errorf("%s renewed until %s, want %s", tc.secret, renewed.NotAfter, want)
		}
		if err := verifies(t, got[tc.secret], tc.key, before["demo-ca"].Data[tc.caKey], x509.ExtKeyUsageClientAuth, o.Now); err != nil {
			t.Errorf("%s renewed under another CA: %v", tc.secret, err)
		}
	}
	if d.Action != nil || len(podsIn(d.Children)) != 3 || conditionOf(d.Status, v1beta2.ConditionProgressing).Status != metav1.ConditionFalse {
		t.Errorf("a leaf renewal restarted or changed members: action %v, pods %v, progressing %+v", d.Action, podsIn(d.Children), conditionOf(d.Status, v1beta2.ConditionProgressing))
	}
}

func TestAutoTLSRotatesTheCAs(t *testing.T) {
	o := runningAuto(t, 3)
	firstCA := o.SecretChildren["demo-ca"].Data
	oldPeerCA, _ := pki.Parse(firstCA[caPeerCert], nil)

	// Leaves renewed at 2, 4 and 6 minutes; the last one is cut to the
	// CA's expiry.
	renewThrough(t, o, testNow.Add(7*time.Minute))
	if got := conditionOf(Plan(o).Status, v1beta2.ConditionCertificatesReady); got.Reason != ReasonCertificatesValid {
		t.Fatalf("before the CA is due: CertificatesReady %+v", got)
	}

	// 1. Due: a new CA pair is made, and nothing else changes.
	o.Now = testNow.Add(8*time.Minute + time.Second)
	d := Plan(o)
	ca := secretsIn(t, d)["demo-ca"]
	if !bytes.Equal(ca.Data[caPeerCert], firstCA[caPeerCert]) || len(ca.Data[nextCA+caPeerCert]) == 0 || len(ca.Data[nextCA+caClientKey]) == 0 {
		t.Fatalf("a due CA must bring in a new pair as next- while the old one signs: keys %v", sorted(keysOf(ca.Data)))
	}
	if d.Action != nil || len(podsIn(d.Children)) != 3 {
		t.Errorf("making the new CA moved members: action %v, pods %v", d.Action, podsIn(d.Children))
	}
	for _, name := range []string{"demo-peer-tls", "demo-server-tls"} {
		if diff := cmp.Diff(o.SecretChildren[name].Data, secretsIn(t, d)[name].Data); diff != "" {
			t.Errorf("%s changed before the new CA was stored (-want +got):\n%s", name, diff)
		}
	}
	applySecrets(t, o, d)
	newPeerCA, _ := pki.Parse(o.SecretChildren["demo-ca"].Data[nextCA+caPeerCert], nil)

	// 2. Stored: the bundles trust both, and the members roll to load it.
	d = Plan(o)
	peer := secretsIn(t, d)["demo-peer-tls"]
	if want := append(append([]byte{}, firstCA[caPeerCert]...), newPeerCA.CertPEM...); !bytes.Equal(peer.Data[v1beta2.PeerCAKey], want) {
		t.Errorf("the peer bundle must hold the old CA then the new one")
	}
	if got := conditionOf(d.Status, v1beta2.ConditionProgressing); got.Reason != ReasonRollingChange && got.Reason != ReasonMovingLeader {
		t.Errorf("members that do not trust the new CA must roll, one at a time: Progressing %+v", got)
	}
	if got := conditionOf(d.Status, v1beta2.ConditionCertificatesReady); got.Reason != ReasonRotatingCA {
		t.Errorf("CertificatesReady = %+v, want %s", got, ReasonRotatingCA)
	}
	if n := len(podsIn(d.Children)); n != 2 {
		t.Errorf("the rollout's first step drops one member's Pod (on its claim): %d of 3 Pods left", n)
	}
	applySecrets(t, o, d)

	// 3. Every member trusts it: it signs, every leaf is issued anew, the
	// old CA stays trusted until it expires.
	for _, pod := range o.Pods {
		trusting(pod, newPeerCA.Fingerprint())
	}
	d = Plan(o)
	got := secretsIn(t, d)
	ca = got["demo-ca"]
	if !bytes.Equal(ca.Data[caPeerCert], newPeerCA.CertPEM) || !bytes.Equal(ca.Data[oldCA+caPeerCert], oldPeerCA.CertPEM) || len(ca.Data[oldCA+caPeerKey]) > 0 || len(ca.Data[nextCA+caPeerCert]) > 0 {
		t.Fatalf("after the switch the CA Secret holds %v", sorted(keysOf(ca.Data)))
	}
	leavesUnder(t, got, ca, o.Now, "is not re-issued under the new CA")
	if d.Action != nil || len(podsIn(d.Children)) != 3 {
		t.Errorf("the switch moved members: action %v, pods %v", d.Action, podsIn(d.Children))
	}
	applySecrets(t, o, d)

	// 4. The old CA expires, and leaves the bundles, with no restart.
	o.Now = testNow.Add(12*time.Minute + time.Second)
	d = Plan(o)
	got = secretsIn(t, d)
	if len(got["demo-ca"].Data[oldCA+caPeerCert]) > 0 || !bytes.Equal(got["demo-peer-tls"].Data[v1beta2.PeerCAKey], newPeerCA.CertPEM) {
		t.Errorf("the expired CA is still trusted")
	}
	if d.Action != nil || len(podsIn(d.Children)) != 3 {
		t.Errorf("dropping the old CA moved members: action %v, pods %v", d.Action, podsIn(d.Children))
	}
}

func TestAutoTLSSecretProblems(t *testing.T) {
	tests := []struct {
		name, reason string
		edit         func(*Observed)
		want         string
		wantKept     bool
	}{
		{"a Secret of the name, not the cluster's", "another owner's Secret is reported, never overwritten", func(o *Observed) {
			o.Secrets = map[string]*corev1.Secret{"demo-peer-tls": secret("demo-peer-tls", map[string][]byte{"x": nil})}
			delete(o.SecretChildren, "demo-peer-tls")
		}, ReasonTLSSecretTaken, true},
		{"a CA that does not parse", "a broken CA is reported, not replaced behind the members' back", func(o *Observed) {
			o.SecretChildren["demo-ca"].Data[caPeerCert] = []byte("garbage")
			o.SecretChildren["demo-ca"].ResourceVersion = "2"
		}, ReasonCASecretInvalid, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := runningAuto(t, 3)
			tt.edit(o)
			d := Plan(o)
			if got := conditionOf(d.Status, v1beta2.ConditionCertificatesReady); got.Status != metav1.ConditionFalse || got.Reason != tt.want {
				t.Errorf("%s: CertificatesReady = %+v, want False %s", tt.reason, got, tt.want)
			}
			if got := conditionOf(d.Status, v1beta2.ConditionDegraded); got.Reason != tt.want {
				t.Errorf("%s: Degraded = %+v", tt.reason, got)
			}
			for name, s := range o.SecretChildren {
				if kept := secretsIn(t, d)[name]; kept == nil || !cmp.Equal(kept.Data, s.Data) {
					t.Errorf("%s: Secret %s not kept as observed", tt.reason, name)
				}
			}
			if d.Action != nil || len(podsIn(d.Children)) != 3 {
				t.Errorf("%s: members moved: action %v, pods %v", tt.reason, d.Action, podsIn(d.Children))
			}
		})
	}
}

func TestAutoTLSLostCASecretRotates(t *testing.T) {
	o := runningAuto(t, 3)
	peerBundle := o.SecretChildren["demo-peer-tls"].Data[v1beta2.PeerCAKey]
	delete(o.SecretChildren, "demo-ca")
	d := Plan(o)
	ca := secretsIn(t, d)["demo-ca"]
	if ca == nil || !bytes.Equal(ca.Data[caPeerCert], peerBundle) || len(ca.Data[caPeerKey]) > 0 || len(ca.Data[nextCA+caPeerKey]) == 0 {
		t.Fatalf("a deleted CA Secret must come back with the CA the members trust (read from their bundles, without its key) and a new CA to rotate to")
	}
	if d.Action != nil || len(podsIn(d.Children)) != 3 {
		t.Errorf("members moved before the new CA was stored: action %v, pods %v", d.Action, podsIn(d.Children))
	}
}

func TestAutoTLSRotateAnnotation(t *testing.T) {
	o := runningAuto(t, 3)
	o.Cluster.Annotations = map[string]string{AnnotationRotateCA: "key-exposed-2026-11-27"}
	d := Plan(o)
	ca := secretsIn(t, d)["demo-ca"]
	if len(ca.Data[nextCA+caPeerCert]) == 0 || ca.Annotations[AnnotationCAMadeFor] != "key-exposed-2026-11-27" {
		t.Fatalf("a new %s value must bring in new CAs and be recorded on the CA Secret: keys %v, annotations %v", AnnotationRotateCA, sorted(keysOf(ca.Data)), ca.Annotations)
	}
	applySecrets(t, o, d)
	again := secretsIn(t, Plan(o))["demo-ca"]
	if !bytes.Equal(again.Data[nextCA+caPeerCert], ca.Data[nextCA+caPeerCert]) {
		t.Error("the same annotation value made another CA")
	}

	created := autoCluster(3, false)
	created.Annotations = map[string]string{AnnotationRotateCA: "from-git"}
	fresh := issuedAuto(t, created)
	if got := secretsIn(t, Plan(fresh))["demo-ca"]; len(got.Data[nextCA+caPeerCert]) > 0 {
		t.Error("a cluster created with the annotation rotated its brand new CAs: an annotation left in Git must never rotate by itself")
	}
}
