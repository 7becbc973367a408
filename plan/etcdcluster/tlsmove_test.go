package etcdcluster

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/pki"
)

// runningStatic is a running cluster of ready members on claims that
// mount the Secrets of spec.TLS.static, m0 the leader, with the status a
// sync under spec.TLS.static records.
func runningStatic(t *testing.T, size int) *Observed {
	t.Helper()
	c := tlsCluster(size)
	c.Spec.Pod = &v1beta2.PodPolicy{PersistentVolumeClaimSpec: &corev1.PersistentVolumeClaimSpec{}}
	c.Status.Phase = v1beta2.PhaseRunning
	o := withSecrets(observed(c), issued(t))
	o.Membership = memberList(1)
	for i := range size {
		pod := onSpec(readyPod(name(i)), c.Spec)
		pod.Spec.Volumes = []corev1.Volume{{Name: dataVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name(i)},
		}}}
		o.PVCs[name(i)] = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: testNS}}
		addTLS(pod, c.TLSSecrets())
		o.Pods[name(i)] = pod
		o.Membership.Members = append(o.Membership.Members, member(uint64(i+1), name(i)))
	}
	d := Plan(o)
	if d.Action != nil || len(podsIn(d.Children)) != size {
		t.Fatalf("the static cluster is not steady: action %v, children %v", d.Action, childNames(d.Children))
	}
	if diff := cmp.Diff(c.Spec.TLS.Static, d.Status.TLS.Static); diff != "" {
		t.Fatalf("status.TLS.static must record the Secrets the members mount (-want +got):\n%s", diff)
	}
	c.Status.TLS = d.Status.TLS
	return o
}

// rollAll replaces every member Pod by the one the planner renders now,
// as the rollout would one at a time: the same member, on its claim.
func rollAll(t *testing.T, o *Observed) {
	t.Helper()
	p := &planner{o: o, observed: o, spec: o.Cluster.Spec.WithDefaults(), serving: map[string]bool{}}
	p.certs = p.planCertificates()
	if p.certs.problem != "" {
		t.Fatalf("rolling: %s", p.certs.problemMessage)
	}
	for name, pod := range o.Pods {
		rolled := onSpec(readyPod(name), o.Cluster.Spec)
		if marker := p.trustMarker(); marker != "" {
			rolled = trusting(rolled, marker)
		}
		rolled.Spec.Volumes = pod.Spec.Volumes[:1]
		addTLS(rolled, p.mountedSecrets())
		o.Pods[name] = rolled
	}
}

// steps checks an answer moves no member: no membership change and, with
// roll, exactly one Pod dropped (the rollout's step on a claim).
func steps(t *testing.T, step string, d Decision, size int, roll bool) {
	t.Helper()
	if d.Action != nil {
		t.Errorf("%s: a membership change (%v): the members must keep their IDs", step, d.Action)
	}
	want := size
	if roll {
		want--
	}
	if got := len(podsIn(d.Children)); got != want {
		t.Errorf("%s: %d member Pods answered, want %d; status %+v", step, got, want, d.Status.Conditions)
	}
}

func TestMoveFromStaticTLSToAuto(t *testing.T) {
	o := runningStatic(t, 3)
	static := o.Secrets
	staticPeerCA := static[peerSecret].Data[v1beta2.PeerCAKey]
	o.Cluster.Spec.TLS = &v1beta2.TLSPolicy{Auto: &v1beta2.AutoTLS{
		Validity: &metav1.Duration{Duration: 6 * time.Minute}, RenewBefore: &metav1.Duration{Duration: 4 * time.Minute},
	}}
	if names := relatedSecretNames(o.Cluster); !slices.Contains(names, peerSecret) || !slices.Contains(names, operatorSecret) {
		t.Fatalf("the customize hook must go on relating the Secrets the members run with: %v", names)
	}

	// 1. The user's CAs are taken in, new CAs come in as next, and the
	// user's leaves are copied. Nothing moves before these are stored.
	d := Plan(o)
	steps(t, "taking in", d, 3, false)
	got := secretsIn(t, d)
	ca := got["demo-ca"]
	if ca == nil || !bytes.Equal(ca.Data[caPeerCert], staticPeerCA) || len(ca.Data[caPeerKey]) > 0 || len(ca.Data[nextCA+caPeerKey]) == 0 {
		t.Fatalf("the CA Secret must hold the user's CAs, without keys, and new ones as next: %v", sorted(keysOf(ca.Data)))
	}
	nextPeer, err := pki.Parse(ca.Data[nextCA+caPeerCert], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ secret, from, cert, caKey string }{
		{"demo-peer-tls", peerSecret, v1beta2.PeerCertKey, v1beta2.PeerCAKey},
		{"demo-server-tls", serverSecret, v1beta2.ServerCertKey, v1beta2.ServerCAKey},
		{"demo-operator-tls", operatorSecret, v1beta2.ClientCertKey, v1beta2.ClientCAKey},
	} {
		if !bytes.Equal(got[tc.secret].Data[tc.cert], static[tc.from].Data[tc.cert]) {
			t.Errorf("%s must copy the leaf the members serve (%s)", tc.secret, tc.from)
		}
	}
	if want := append(append([]byte{}, staticPeerCA...), nextPeer.CertPEM...); !bytes.Equal(got["demo-peer-tls"].Data[v1beta2.PeerCAKey], want) {
		t.Errorf("the peer bundle must trust the user's CA and the new one")
	}
	if conditionOf(d.Status, v1beta2.ConditionCertificatesReady).Reason != ReasonCertificatesIssuing || d.Status.TLS.Static == nil {
		t.Errorf("while taking in: CertificatesReady %+v, status.TLS.static %+v", conditionOf(d.Status, v1beta2.ConditionCertificatesReady), d.Status.TLS.Static)
	}
	applySecrets(t, o, d)
	o.Cluster.Status.TLS = d.Status.TLS

	// 2. Stored: members roll onto the hook's Secrets, one at a time.
	d = Plan(o)
	steps(t, "rolling in", d, 3, true)
	if !strings.HasPrefix(d.Status.TLS.CARotation, "moving from spec.TLS.static") {
		t.Errorf("status.TLS.caRotation = %q", d.Status.TLS.CARotation)
	}
	applySecrets(t, o, d)
	rollAll(t, o)

	// 3. Every member trusts the new CAs: they sign, and every leaf is
	// re-issued in place. The user's CAs are still trusted.
	d = Plan(o)
	steps(t, "switching", d, 3, false)
	got = secretsIn(t, d)
	ca = got["demo-ca"]
	if !bytes.Equal(ca.Data[caPeerCert], nextPeer.CertPEM) || !bytes.Equal(ca.Data[oldCA+caPeerCert], staticPeerCA) {
		t.Fatalf("after the switch the CA Secret holds %v", sorted(keysOf(ca.Data)))
	}
	leavesUnder(t, got, ca, o.Now, "is not re-issued under the hook's CA")
	if d.Status.TLS.Static != nil {
		t.Errorf("status.TLS.static is still %+v once no member needs the user's Secrets", d.Status.TLS.Static)
	}
	applySecrets(t, o, d)
	o.Cluster.Status.TLS = d.Status.TLS

	// 4. Every leaf observed under the new CA: the kubelets' delay starts.
	d = Plan(o)
	steps(t, "waiting for the kubelets", d, 3, false)
	stamped := secretsIn(t, d)["demo-ca"].Annotations[AnnotationLeavesReissued]
	if stamped != o.Now.UTC().Format(time.RFC3339) {
		t.Fatalf("%s = %q, want now", AnnotationLeavesReissued, stamped)
	}
	if d.ResyncAfter > DefaultSecretPropagation {
		t.Errorf("ResyncAfter = %s: the hook must come back when the user's CAs may go", d.ResyncAfter)
	}
	applySecrets(t, o, d)

	// 5. Then the user's CAs leave the bundles, and the members roll to
	// trust them no more.
	o.Now = o.Now.Add(DefaultSecretPropagation + time.Second)
	d = Plan(o)
	steps(t, "dropping the user's CAs", d, 3, true)
	got = secretsIn(t, d)
	if len(got["demo-ca"].Data[oldCA+caPeerCert]) > 0 || !bytes.Equal(got["demo-peer-tls"].Data[v1beta2.PeerCAKey], nextPeer.CertPEM) {
		t.Errorf("the user's CA is still trusted")
	}
	applySecrets(t, o, d)
	rollAll(t, o)
	d = Plan(o)
	steps(t, "moved", d, 3, false)
	if got := conditionOf(d.Status, v1beta2.ConditionCertificatesReady); got.Reason != ReasonCertificatesValid || d.Status.TLS.CARotation != "" {
		t.Errorf("after the move: CertificatesReady %+v, caRotation %q", got, d.Status.TLS.CARotation)
	}
}

func TestMoveFromStaticTLSNeedsTheRecord(t *testing.T) {
	tests := []struct {
		name, reason string
		edit         func(*Observed)
		want         string
	}{
		{"no status.TLS.static", "a hook that never synced the cluster under spec.TLS.static does not know which Secrets the members run with",
			func(o *Observed) { o.Cluster.Status.TLS = nil }, ReasonTLSChangeRefused},
		{"a Secret gone", "the user's Secrets are copied: one that is gone is named, and nothing moves",
			func(o *Observed) { delete(o.Secrets, serverSecret) }, ReasonTLSSecretInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := runningStatic(t, 3)
			o.Cluster.Spec.TLS = &v1beta2.TLSPolicy{Auto: &v1beta2.AutoTLS{}}
			tt.edit(o)
			d := Plan(o)
			steps(t, tt.name, d, 3, false)
			if got := conditionOf(d.Status, v1beta2.ConditionDegraded); got.Reason != tt.want {
				t.Errorf("%s: Degraded = %+v, want %s", tt.reason, got, tt.want)
			}
			if n := len(secretsIn(t, d)); n != 0 {
				t.Errorf("%s: %d Secrets rendered", tt.reason, n)
			}
		})
	}
}

func TestAutoTLSDropsTheOldCAOnceLeavesArePickedUp(t *testing.T) {
	o := runningAuto(t, 3)
	o.SecretPropagation = 30 * time.Second
	o.Cluster.Annotations = map[string]string{AnnotationRotateCA: "exposed"}
	d := Plan(o)
	applySecrets(t, o, d)
	rollAll(t, o)
	d = Plan(o) // the new CAs sign
	applySecrets(t, o, d)
	if len(o.SecretChildren["demo-ca"].Data[oldCA+caPeerCert]) == 0 {
		t.Fatal("the old CA must stay trusted while the leaves it signed may still be served")
	}
	d = Plan(o)
	steps(t, "stamped", d, 3, false)
	applySecrets(t, o, d)

	o.Now = o.Now.Add(29 * time.Second)
	d = Plan(o)
	steps(t, "within the kubelets' delay", d, 3, false)
	if len(secretsIn(t, d)["demo-ca"].Data[oldCA+caPeerCert]) == 0 {
		t.Error("the old CA was dropped before the kubelets could bring the new leaves into every Pod")
	}
	o.Now = o.Now.Add(2 * time.Second)
	d = Plan(o)
	steps(t, "after the kubelets' delay", d, 3, true)
	if len(secretsIn(t, d)["demo-ca"].Data[oldCA+caPeerCert]) > 0 {
		t.Error("the old CA (a key believed exposed) is still trusted, months before it expires")
	}
}

func TestMoveFromAutoTLSToStatic(t *testing.T) {
	// Refused without an operatorSecret: the hook would lose its way in.
	refused := runningAuto(t, 3)
	refused.Cluster.Spec.TLS = tlsCluster(3).Spec.TLS
	refused.Cluster.Spec.TLS.Static.OperatorSecret = ""
	refused.Secrets = issued(t)
	d := Plan(refused)
	steps(t, "refused", d, 3, false)
	if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Reason != ReasonTLSChangeRefused || !strings.Contains(deg.Message, "only with TLS for peers and clients and an operatorSecret") {
		t.Errorf("the move to spec.TLS.static without an operatorSecret: Degraded %+v", deg)
	}
	if got := secretsIn(t, d); len(got) != 4 {
		t.Errorf("the hook's Secrets must be kept while the move is refused: %v", sorted(keysOf(got)))
	}

	// The steps.
	o := runningAuto(t, 3)
	o.Cluster.Status.TLS = Plan(o).Status.TLS
	autoCA := o.SecretChildren["demo-ca"].Data[caPeerCert]
	o.Cluster.Spec.TLS = tlsCluster(3).Spec.TLS
	o.Secrets = issued(t)
	static := o.Secrets
	staticPeerCA := static[peerSecret].Data[v1beta2.PeerCAKey]
	mounts := func(name string) string { return observedPodTLS(o.Pods[name]).peer }

	// 1. The user's CAs come in as next, without keys; nothing else moves.
	d = Plan(o)
	steps(t, "bringing the user's CAs in", d, 3, false)
	ca := secretsIn(t, d)["demo-ca"]
	if !bytes.Equal(ca.Data[nextCA+caPeerCert], staticPeerCA) || len(ca.Data[nextCA+caPeerKey]) > 0 || !bytes.Equal(ca.Data[caPeerCert], autoCA) {
		t.Fatalf("the CA Secret must bring the user's CAs in as next, without keys: %v", sorted(keysOf(ca.Data)))
	}
	if !strings.HasPrefix(d.Status.TLS.CARotation, "moving to spec.TLS.static") {
		t.Errorf("status.TLS.caRotation = %q", d.Status.TLS.CARotation)
	}
	applySecrets(t, o, d)

	// 2. Members roll, still on the hook's Secrets, to trust both.
	d = Plan(o)
	steps(t, "rolling to trust the user's CAs", d, 3, true)
	if want := append(append([]byte{}, autoCA...), staticPeerCA...); !bytes.Equal(secretsIn(t, d)["demo-peer-tls"].Data[v1beta2.PeerCAKey], want) {
		t.Errorf("the peer bundle must trust the hook's CA and the user's")
	}
	applySecrets(t, o, d)
	rollAll(t, o)
	if got := mounts(name(0)); got != "demo-peer-tls" {
		t.Fatalf("while they learn to trust the user's CAs, members mount the hook's Secrets, not %q", got)
	}

	// 3. Every member trusts them: the user's leaves are copied in place.
	d = Plan(o)
	steps(t, "copying the user's leaves", d, 3, false)
	got := secretsIn(t, d)
	for _, tc := range []struct{ secret, from, cert string }{
		{"demo-peer-tls", peerSecret, v1beta2.PeerCertKey},
		{"demo-server-tls", serverSecret, v1beta2.ServerCertKey},
		{"demo-operator-tls", operatorSecret, v1beta2.ClientCertKey},
	} {
		if !bytes.Equal(got[tc.secret].Data[tc.cert], static[tc.from].Data[tc.cert]) {
			t.Errorf("%s must serve the user's leaf (%s) before members move onto it", tc.secret, tc.from)
		}
	}
	applySecrets(t, o, d)
	d = Plan(o) // stamped
	steps(t, "waiting for the kubelets", d, 3, false)
	applySecrets(t, o, d)

	// 4. A kubelet delay later, members roll onto the user's Secrets.
	o.Now = o.Now.Add(DefaultSecretPropagation + time.Second)
	d = Plan(o)
	steps(t, "rolling onto the user's Secrets", d, 3, true)
	applySecrets(t, o, d)
	rollAll(t, o)
	if got := mounts(name(0)); got != peerSecret {
		t.Fatalf("members must end on the user's Secrets, not %q", got)
	}
	if o.Pods[name(0)].Annotations[AnnotationTrustedCA] != "" {
		t.Errorf("a member on spec.TLS.static carries %s", AnnotationTrustedCA)
	}

	// 5. Moved: the hook's Secrets go, and the cluster is a static one.
	d = Plan(o)
	steps(t, "moved", d, 3, false)
	if left := secretsIn(t, d); len(left) != 0 {
		t.Errorf("the hook's Secrets must go once no member mounts them: %v", sorted(keysOf(left)))
	}
	if st := d.Status.TLS; st == nil || st.CARotation != "" || st.Static == nil || len(st.Certificates) != 3 {
		t.Errorf("after the move, status.TLS must describe the user's certificates alone: %+v", st)
	}
	if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Status == metav1.ConditionTrue {
		t.Errorf("after the move: Degraded %+v", deg)
	}
	o.SecretChildren = nil
	if d := Plan(o); len(podsIn(d.Children)) != 3 || d.Action != nil {
		t.Errorf("a static cluster: pods %v, action %v", podsIn(d.Children), d.Action)
	}
}
