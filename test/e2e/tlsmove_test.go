package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdhook/etcd-hook/internal/tlstest"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// TestTLSMovesBetweenStaticAndAuto: a running cluster on claims, with the
// CoreOS example's Secrets of spec.TLS.static, is moved to spec.TLS.auto
// and back under a writer. The members keep their IDs, no write is lost,
// and a put fails only at a leadership handover (see
// putsFailedAwayFromHandovers); after each move, certificates of the CA
// left behind are refused.
func TestTLSMovesBetweenStaticAndAuto(t *testing.T) {
	s := newFaultScenario(t, harness.Options{ClusterCustomize: true})
	ca, err := tlstest.NewCA("etcd ca")
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := ca.IssueCluster(exampleName, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	putSecret(t, s.env, tlsPeerSecret, secrets.Peer)
	putSecret(t, s.env, tlsServerSecret, secrets.Server)
	putSecret(t, s.env, tlsOperatorSecret, secrets.Client)
	// Every client of the scenario calls as an application with the
	// operator Secret mounted: the hook's while it exists, else the user's.
	trust := &secretTrust{env: s.env, secret: exampleName + "-operator-tls", fallback: tlsOperatorSecret}
	t.Cleanup(UseClientTLS(exampleName, ns, trust.config()))
	appPair, err := ca.ClientPair("app")
	if err != nil {
		t.Fatal(err)
	}
	usersCA := trust.config()
	usersCA.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &appPair, nil }

	spec := map[string]any{"size": 3, "version": faultVersion, "TLS": tlsSpec, "pod": map[string]any{"persistentVolumeClaimSpec": map[string]any{
		"accessModes": []any{"ReadWriteOnce"},
		"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
	}}}
	s.createSpec("TLS move: create with spec.TLS.static, size 3, on claims", spec)
	if t.Failed() {
		return
	}
	if err := s.putWith(usersCA); err != nil {
		t.Fatalf("before the move, a certificate of the user's CA: %v", err)
	}
	s.startFaultWriter("tls-move")
	world := s.world(s.c.PodNames())

	s.tlsMove("from spec.TLS.static to auto", world, map[string]any{"static": nil, "auto": map[string]any{}}, func(st ParentStatus) bool {
		return st.TLS.Static == nil
	})
	if t.Failed() {
		return
	}
	if err := s.putWith(usersCA); err == nil {
		t.Error("after the move to auto, a certificate of the user's CA is still accepted")
	}
	hooks, err := trust.data()
	if err != nil {
		t.Fatal(err)
	}
	hookPair, err := tls.X509KeyPair(hooks["etcd-client.crt"], hooks["etcd-client.key"])
	if err != nil {
		t.Fatal(err)
	}
	s.tlsMove("from spec.TLS.auto back to static", world, map[string]any{"auto": nil, "static": tlsSpec["static"]}, func(st ParentStatus) bool {
		_, found := s.env.API.Get(harness.Ref{Type: harness.TypeSecret, Namespace: ns, Name: exampleName + "-ca"})
		return st.TLS.Static != nil && !found
	})
	if t.Failed() {
		return
	}
	if err := s.putWith(usersCA); err != nil {
		t.Errorf("after the move back to static, a certificate of the user's CA: %v", err)
	}
	hooksCA := trust.config()
	hooksCA.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &hookPair, nil }
	if err := s.putWith(hooksCA); err == nil {
		t.Error("after the move back to static, a certificate of the hook's CA is still accepted")
	}
	for _, name := range []string{tlsPeerSecret, tlsServerSecret, tlsOperatorSecret} {
		if _, ok := s.env.API.Get(harness.Ref{Type: harness.TypeSecret, Namespace: ns, Name: name}); !ok {
			t.Errorf("the user's Secret %s is gone: the hook must leave it alone", name)
		}
	}
	s.verifyWrites("the moves between spec.TLS.static and auto")
	t.Logf("TLS move: %d handshakes verified against the bundle of the moment", trust.handshakes.Load())
}

// tlsMove patches spec.TLS and waits for the move to end: no put failed
// away from a leadership handover, the same members, every Pod restarted.
func (s *scenario) tlsMove(step string, world faultWorld, to map[string]any, over func(ParentStatus) bool) {
	t := s.t
	s.waitWrites(writesAround)
	attempts, acked := s.w.Counts()
	from := time.Now()
	pods := s.c.Pods()
	since := len(s.loggedActions())
	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"TLS": to}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.waitParent(6*time.Minute, step, func(st ParentStatus) bool {
		ready, _ := st.Condition("Ready")
		degraded, _ := st.Condition("Degraded")
		return ready == "True" && degraded != "True" && st.TLS != nil && st.TLS.CARotation == "" && over(st)
	})
	if t.Failed() {
		return
	}
	s.waitWrites(writesAround)
	attemptsAfter, ackedAfter := s.w.Counts()
	failed := (attemptsAfter - attempts) - (ackedAfter - acked)
	actions := s.loggedActions()[since:]
	if n := s.putsFailedAwayFromHandovers(step, from, failed, actions); n != 0 {
		t.Errorf("%s: %d of %d puts failed away from a leadership handover, want none", step, n, attemptsAfter-attempts)
	}
	// Leadership moves off a member before its restart; nothing else.
	for _, a := range actions {
		if !strings.HasPrefix(a.Action, "move leadership") {
			t.Errorf("%s: the hook changed the membership: %+v", step, a)
		}
	}
	s.checkWorld(step, faultWorld{Members: world.Members, Pods: s.podUIDs()}, s.c.PodNames())
	for _, p := range s.c.Pods() {
		if podByName(pods, p.Name).UID == p.UID {
			t.Errorf("%s: Pod %s was not restarted, so its etcd trusts what it trusted before", step, p.Name)
		}
	}
	t.Logf("%s: moved in %s, %d puts, %d failed (each logged above; none lost: verifyWrites)", step, time.Since(start).Round(time.Second), attemptsAfter-attempts, failed)
}

// putWith puts one key through the client Service with that TLS
// configuration.
func (s *scenario) putWith(cfg *tls.Config) error { return s.putAt(s.c.ServiceURL(), cfg) }

// putAt puts a key through endpoint as a client with cfg.
func (s *scenario) putAt(endpoint string, cfg *tls.Config) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(s.env.Ctx(), 3*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, "/tls-move/probe", "x")
	return err
}

// refusedAfterRotation: a certificate of the CA a rotation replaced,
// still within its validity, is refused once the rotation is over.
func (s *scenario) refusedAfterRotation(trust *secretTrust, before map[string][]byte) {
	t := s.t
	pair, err := tls.X509KeyPair(before["etcd-client.crt"], before["etcd-client.key"])
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if !time.Now().Before(leaf.NotAfter.Add(-5 * time.Second)) {
		t.Logf("the operator certificate of the replaced CA expired before the check (at %s): not checked", leaf.NotAfter)
		return
	}
	old := trust.config()
	old.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	if err := s.putWith(old); err == nil {
		t.Errorf("after the CA rotation, a certificate of the replaced CA (valid until %s) is still accepted", leaf.NotAfter.Format(time.RFC3339))
	}
}
