package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// TLS end to end: the CoreOS TLS example's Secrets, issued in the test,
// mounted into members by the harness's kubelet, related to the hook by
// its customize hook; the hook, the writer and every check call the
// members over mutual TLS.

// The CoreOS example's Secret names (manifests/examples/example-tls-cluster.yaml).
const (
	tlsPeerSecret     = "etcd-peer-tls"
	tlsServerSecret   = "etcd-server-tls"
	tlsOperatorSecret = "etcd-client-tls"
)

// tlsSpec is the CoreOS example's spec.TLS.
var tlsSpec = map[string]any{"static": map[string]any{
	"member":         map[string]any{"peerSecret": tlsPeerSecret, "serverSecret": tlsServerSecret},
	"operatorSecret": tlsOperatorSecret,
}}

type tlsScenario struct {
	*scenario
	ca *tlstest.CA
	// app is the certificate the writer and the checks call with: an
	// application's, signed by the members' CA, not the hook's.
	app tlstest.Leaf
}

func (s *tlsScenario) putSecret(name string, data map[string][]byte) {
	s.t.Helper()
	putSecret(s.t, s.env, name, data)
}

// issue puts new leaves of the CA into the three Secrets and returns the
// serial numbers of the members' peer and server leaves.
func (s *tlsScenario) issue() (peer, server *big.Int) {
	s.t.Helper()
	secrets, err := s.ca.IssueCluster(exampleName, ns, "")
	if err != nil {
		s.t.Fatal(err)
	}
	s.putSecret(tlsPeerSecret, secrets.Peer)
	s.putSecret(tlsServerSecret, secrets.Server)
	s.putSecret(tlsOperatorSecret, secrets.Client)
	return serialOf(s.t, secrets.Peer["peer.crt"]), serialOf(s.t, secrets.Server["server.crt"])
}

func serialOf(t *testing.T, certPEM []byte) *big.Int {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

func (s *tlsScenario) clientConfig(leaf *tlstest.Leaf, roots *tlstest.CA) *tls.Config {
	s.t.Helper()
	cfg := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	cfg.RootCAs.AddCert(roots.Cert)
	if leaf != nil {
		pair, err := leaf.KeyPair()
		if err != nil {
			s.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// servedSerial is the serial number of the leaf a member serves on port,
// as a client with the app certificate sees it in the handshake.
func (s *tlsScenario) servedSerial(member string, port int) (*big.Int, error) {
	host := fmt.Sprintf("%s.%s.%s.svc", member, exampleName, ns)
	cfg := s.clientConfig(&s.app, s.ca)
	cfg.ServerName = host
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", fmt.Sprintf("%s:%d", host, port), cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// newTLSScenario is a scenario whose cluster (the seed example) will run
// with the CoreOS example's TLS Secrets, issued by a CA of its own, and
// whose writer and checks call it with an application's certificate.
func newTLSScenario(t *testing.T, opts harness.Options) *tlsScenario {
	t.Helper()
	base := newFaultScenario(t, opts)
	ca, err := tlstest.NewCA("etcd ca")
	if err != nil {
		t.Fatal(err)
	}
	app, err := ca.Issue(tlstest.LeafOptions{CommonName: "app", Usage: tlstest.Client})
	if err != nil {
		t.Fatal(err)
	}
	s := &tlsScenario{scenario: base, ca: ca, app: app}
	t.Cleanup(UseClientTLS(exampleName, ns, s.clientConfig(&s.app, s.ca)))
	s.issue()
	return s
}

func TestTLS(t *testing.T) {
	s := newTLSScenario(t, harness.Options{ClusterCustomize: true, Backups: true})

	// Created on 3.6 and upgraded to 3.7 over TLS; a member of 3.7 is then
	// killed and restarts with its certificates.
	const from, to = oldVersion, newVersion
	s.createSpec("TLS: create, size 3, v"+from, map[string]any{"size": 3, "version": from, "TLS": tlsSpec})
	if t.Failed() {
		return
	}
	s.refusesOtherClients()
	s.missingSecret()
	s.rotateLeaves()
	if t.Failed() {
		return
	}
	s.backup()
	s.frozenWhile("a broken operator Secret", "TLSSecretInvalid", func() {
		data := maps.Clone(s.secret(tlsOperatorSecret))
		data["etcd-client.key"] = []byte("not a key")
		s.putSecret(tlsOperatorSecret, data)
	}, func(before map[string][]byte) { s.putSecret(tlsOperatorSecret, before) }, tlsOperatorSecret)
	s.frozenWhile("spec.TLS removed", "TLSChangeRefused", func() {
		if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"TLS": nil}); err != nil {
			t.Fatal(err)
		}
	}, func(map[string][]byte) {
		if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"TLS": tlsSpec}); err != nil {
			t.Fatal(err)
		}
	}, "")
	if t.Failed() {
		return
	}
	// frozenWhile scaled 3→5→3 twice, each step converged with 0 writes lost.
	s.upgrade(to)
	if t.Failed() {
		return
	}
	s.killOne()
}

// refusesOtherClients: the members answer the app's certificate, and
// refuse a plaintext client, a client without a certificate and one with a
// certificate of another CA. Their metrics port answers /health without a
// certificate, which is what the kubelet probes.
func (s *tlsScenario) refusesOtherClients() {
	t := s.t
	other, err := tlstest.NewCA("another ca")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Issue(tlstest.LeafOptions{CommonName: "stranger", Usage: tlstest.Client})
	if err != nil {
		t.Fatal(err)
	}
	member := s.c.PodNames()[0]
	httpsURL := s.c.MemberURL(member)
	plainURL := fmt.Sprintf("http://%s.%s.%s.svc:2379", member, exampleName, ns)
	for _, tc := range []struct {
		name     string
		endpoint string
		cfg      *tls.Config
		wantOK   bool
	}{
		{"the app's certificate", httpsURL, s.clientConfig(&s.app, s.ca), true},
		{"plaintext", plainURL, nil, false},
		{"TLS without a client certificate", httpsURL, s.clientConfig(nil, s.ca), false},
		{"a certificate of another CA", httpsURL, s.clientConfig(&stranger, s.ca), false},
	} {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{tc.endpoint}, TLS: tc.cfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			if tc.wantOK {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		ctx, cancel := context.WithTimeout(s.env.Ctx(), 3*time.Second)
		_, listErr := cli.MemberList(ctx)
		_, statusErr := cli.Status(ctx, tc.endpoint)
		_, putErr := cli.Put(ctx, "/tls/"+tc.name, "x")
		cancel()
		_ = cli.Close()
		for _, call := range []struct {
			what string
			err  error
		}{{"member list", listErr}, {"status", statusErr}, {"put", putErr}} {
			if tc.wantOK && call.err != nil {
				t.Errorf("%s: %s failed: %v", tc.name, call.what, call.err)
			}
			if !tc.wantOK && call.err == nil {
				t.Errorf("%s: %s succeeded, want it refused", tc.name, call.what)
			}
		}
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(fmt.Sprintf("http://%s.%s.%s.svc:2381/health", member, exampleName, ns))
	if err != nil {
		t.Errorf("metrics port /health: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("metrics port /health: HTTP %d, want 200 without a client certificate", resp.StatusCode)
		}
	}
}

// rotateLeaves: new peer, server and operator leaves of the same CA,
// written into the Secrets in place while the writer runs. The harness's
// kubelet refreshes the mounted files as the kubelet does; etcd serves the
// new leaves from its next handshake. No member restarts, and no put fails.
func (s *tlsScenario) rotateLeaves() {
	t := s.t
	s.startWriter("tls-rotate")
	s.waitWrites(writesAround)
	pods := s.c.Pods()
	attempts, acked := s.w.Counts()

	peer, server := s.issue()
	for _, p := range pods {
		for _, port := range []struct {
			port int
			want *big.Int
		}{{2380, peer}, {2379, server}} {
			err := s.env.WaitFor(90*time.Second, fmt.Sprintf("%s serves the new leaf on %d", p.Name, port.port), func() (bool, string) {
				got, err := s.servedSerial(p.Name, port.port)
				if err != nil {
					return false, err.Error()
				}
				return got.Cmp(port.want) == 0, fmt.Sprintf("serial %x, want %x", got, port.want)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	s.waitWrites(writesAround)
	attemptsAfter, ackedAfter := s.w.Counts()
	if failed := (attemptsAfter - attempts) - (ackedAfter - acked); failed != 0 {
		t.Errorf("rotation: %d of %d puts failed, want none", failed, attemptsAfter-attempts)
	}
	for _, p := range s.c.Pods() {
		before := podByName(pods, p.Name)
		if p.UID != before.UID || p.Restarts != before.Restarts {
			t.Errorf("rotation: Pod %s went from uid %s, %d restarts to uid %s, %d restarts; want no restart", p.Name, before.UID, before.Restarts, p.UID, p.Restarts)
		}
	}
	s.verifyWrites("TLS: leaf rotation")
	// The hook now holds only the new operator certificate's connections;
	// the scale and upgrade steps that follow are made through them.
}

func (s *tlsScenario) secret(name string) map[string][]byte {
	s.t.Helper()
	obj, ok := s.env.API.Get(harness.Ref{Type: harness.TypeSecret, Namespace: ns, Name: name})
	if !ok {
		s.t.Fatalf("Secret %s not found", name)
	}
	var secret corev1.Secret
	raw, _ := json.Marshal(obj)
	if err := json.Unmarshal(raw, &secret); err != nil {
		s.t.Fatal(err)
	}
	return secret.Data
}

// frozenWhile breaks the cluster's TLS configuration with do, and checks
// what the README promises: the condition names the problem, and the
// running cluster is left as it is: a scale-out asked for meanwhile is
// not made, no Pod is replaced, the members and the Services stay, and the
// writer is served throughout. undo (given the Secret's data before, when
// secret names one) mends it, and the scale-out is then made.
func (s *tlsScenario) frozenWhile(what, reason string, do func(), undo func(before map[string][]byte), secret string) {
	t := s.t
	s.startWriter("tls-frozen")
	s.waitWrites(writesAround)
	var before map[string][]byte
	if secret != "" {
		before = s.secret(secret)
	}
	pods, members := s.podUIDs(), s.members()
	do()
	s.waitParent(30*time.Second, what+": Degraded "+reason, func(st ParentStatus) bool {
		status, got := st.Condition("Degraded")
		return status == "True" && got == reason
	})
	s.patchSize(5)
	// Long enough for several syncs (each member Pod event and the 5 s
	// resync of a troubled cluster): a scale-out would have begun.
	time.Sleep(6 * time.Second)
	s.waitWrites(writesAround)
	if d := cmp.Diff(pods, s.podUIDs()); d != "" {
		t.Errorf("%s: Pods changed while the cluster is frozen (-before +after):\n%s", what, d)
	}
	if d := cmp.Diff(members, s.members()); d != "" {
		t.Errorf("%s: members changed while the cluster is frozen (-before +after):\n%s", what, d)
	}
	s.checkServicesKept(what)
	_, st, _ := s.c.Parent()
	t.Logf("TLS: %s: frozen: %s", what, st.ConditionMessage("Degraded"))

	undo(before)
	start, syncs := time.Now(), s.syncs()
	s.converge("TLS: "+what+", mended: scale to 5", start, syncs, 5)
	s.startWriter("tls-frozen-back")
	start, syncs = time.Now(), s.syncs()
	s.patchSize(3)
	s.converge("TLS: back to 3", start, syncs, 3)
}

// backup: an EtcdBackup by clusterName snapshots the TLS cluster through
// its https client Service, with the cluster's operator certificate (the
// rotated one), into a real S3 server.
func (s *tlsScenario) backup() {
	t := s.t
	b := &backupScenario{scenario: s.scenario, s3: s3test.Start(t)}
	b.s3.CreateBucket(t, backupBucket)
	b.createSecret("aws", s3test.AccessKey, s3test.SecretKey)
	b.createBackup("tls-backup", b.s3Spec("tls/backup.db", "aws"), nil)
	st := b.waitBackup("tls-backup", 90*time.Second, "the backup of the TLS cluster succeeded", func(st BackupStatus) bool {
		return st.Succeeded && st.LastBackup != nil
	})
	if st.LastBackup.Revision == 0 || st.LastBackup.Size == 0 {
		t.Errorf("backup of the TLS cluster: %+v, want a snapshot with a revision", st.LastBackup)
	}
	t.Logf("TLS: backup: %s, revision %d, %d bytes", st.LastBackup.Location, st.LastBackup.Revision, st.LastBackup.Size)
}

// missingSecret: a new TLS cluster whose server Secret does not exist is
// not created at all, and says which Secret is missing.
func (s *tlsScenario) missingSecret() {
	t := s.t
	const name = "no-secret"
	spec := map[string]any{"size": 3, "TLS": map[string]any{"static": map[string]any{
		"member":         map[string]any{"peerSecret": tlsPeerSecret, "serverSecret": "missing-server-tls"},
		"operatorSecret": tlsOperatorSecret,
	}}}
	if _, err := s.env.MC.CreateParent(ns, name, spec); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Env: s.env, Namespace: ns, Name: name}
	var msg string
	err := s.env.WaitFor(30*time.Second, name+": Degraded TLSSecretInvalid", func() (bool, string) {
		_, st, ok := c.Parent()
		if !ok {
			return false, "no parent"
		}
		status, reason := st.Condition("Degraded")
		msg = st.ConditionMessage("Degraded")
		return status == "True" && reason == "TLSSecretInvalid", status + " " + reason + ": " + msg
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := `Secret "missing-server-tls" (spec.TLS.static.member.serverSecret) not found`; !strings.Contains(msg, want) {
		t.Errorf("Degraded message %q lacks %q", msg, want)
	}
	if pods := c.PodNames(); len(pods) != 0 {
		t.Errorf("a TLS cluster without its Secret has Pods %v, want none", pods)
	}
	for _, svc := range []string{name, name + "-client"} {
		if _, ok := s.env.API.Get(harness.Ref{Type: harness.TypeService, Namespace: ns, Name: svc}); ok {
			t.Errorf("a TLS cluster without its Secret has Service %s, want none: it is not created half-way", svc)
		}
	}
	t.Logf("TLS: missing Secret: %s", msg)
}

// upgrade rolls the TLS cluster to version under the writer.
func (s *tlsScenario) upgrade(version string) {
	t := s.t
	step := "TLS: upgrade to v" + version
	s.startWriter("tls-upgrade")
	s.waitWrites(writesAround)
	start := time.Now()
	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"version": version}); err != nil {
		t.Fatal(err)
	}
	if err := s.env.WaitFor(3*convergeTimeout, "every member on "+version, func() (bool, string) {
		return s.c.Upgraded(s.env.Ctx(), version, 3)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: done in %s", step, time.Since(start).Round(time.Millisecond))
	s.waitWrites(writesAround)
	s.verifyWrites(step)
}

// killOne kill -9s a follower's etcd: the kubelet restarts it on its
// emptyDir and it rejoins over TLS as the same member.
func (s *tlsScenario) killOne() {
	t := s.t
	const step = "TLS: kill -9 a member"
	s.startWriter("tls-kill")
	s.waitWrites(writesAround)
	before := s.members()
	victim := s.follower(s.leader())
	pod := podByName(s.c.Pods(), victim)
	start, syncs := time.Now(), s.syncs()
	s.killEtcd(victim, pod)
	Report(t, s.converge(step, start, syncs, 3))
	if after := s.members(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("members changed across a kill -9: before %v, after %v", before, after)
	}
}
