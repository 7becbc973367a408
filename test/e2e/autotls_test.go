package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// spec.TLS.auto end to end: the hook issues the CAs and certificates as
// Secret children, the harness's Metacontroller applies them, its kubelet
// mounts them into the members and refreshes them in place, and every
// client of the scenario calls the members as an application with the
// Secrets mounted would: it reads the trust bundle and its certificate
// from the Secret at each handshake.

// autoTLSSpec: leaves valid 5 minutes (the shortest accepted) and renewed
// 4m45s ahead, so that a leaf is renewed every 15 seconds; the CAs (10
// minutes) are rotated on request (AnnotationRotateCA), as a key believed
// exposed would be.
var autoTLSSpec = map[string]any{"auto": map[string]any{"validity": "5m", "renewBefore": "4m45s"}}

const (
	annotationRotateCA = "etcd.database.coreos.com/rotate-ca"
	annotationTrusted  = "etcd.database.coreos.com/trusted-ca"
)

// secretTrust is an application's TLS configuration drawn from the
// cluster's operator Secret as it is now: its certificate and its trust
// bundle, read at every handshake.
type secretTrust struct {
	env    *harness.Env
	secret string
	// fallback is read while secret does not exist.
	fallback string
	// handshakes counts the handshakes verified against the bundle.
	handshakes atomic.Int64
}

func (st *secretTrust) data() (map[string][]byte, error) {
	obj, ok := st.env.API.Get(harness.Ref{Type: harness.TypeSecret, Namespace: ns, Name: st.secret})
	if !ok && st.fallback != "" {
		obj, ok = st.env.API.Get(harness.Ref{Type: harness.TypeSecret, Namespace: ns, Name: st.fallback})
	}
	if !ok {
		return nil, fmt.Errorf("Secret %s not found", st.secret)
	}
	var s corev1.Secret
	raw, _ := json.Marshal(obj)
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return s.Data, nil
}

func (st *secretTrust) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verified in VerifyConnection, against the bundle as the Secret
		// holds it at this handshake.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			d, err := st.data()
			if err != nil {
				return nil, err
			}
			pair, err := tls.X509KeyPair(d["etcd-client.crt"], d["etcd-client.key"])
			return &pair, err
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			d, err := st.data()
			if err != nil {
				return err
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(d["etcd-client-ca.crt"]) {
				return errors.New("the trust bundle holds no certificate")
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			host := cs.ServerName
			if net.ParseIP(host) != nil {
				host = ""
			}
			_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, DNSName: host})
			if err == nil {
				st.handshakes.Add(1)
			}
			return err
		},
	}
}

func TestAutoTLS(t *testing.T) {
	s := newFaultScenario(t, harness.Options{ClusterCustomize: true, Backups: true, Restores: true})
	trust := &secretTrust{env: s.env, secret: exampleName + "-operator-tls"}
	t.Cleanup(UseClientTLS(exampleName, ns, trust.config()))

	spec := map[string]any{"size": 3, "version": faultVersion, "TLS": autoTLSSpec, "pod": map[string]any{"persistentVolumeClaimSpec": map[string]any{
		"accessModes": []any{"ReadWriteOnce"},
		"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
	}}}
	s.createSpec("auto TLS: create, size 3, one line of spec.TLS", spec)
	if t.Failed() {
		return
	}
	s.autoTLSSecretsOwned()
	s.autoTLSRefusesStrangers(trust)
	if t.Failed() {
		return
	}
	s.autoTLSRotations(trust)
	if t.Failed() {
		return
	}
	s.autoTLSAuth()
	if t.Failed() {
		return
	}
	s.autoTLSBackupRestore()
}

// autoTLSAuth: spec.auth on the running cluster. The hook makes root,
// turns authentication on and declares the role and the user; the user's
// certificate, from its Secret, writes under /app/ and nowhere else; the
// user dropped from the spec loses access. The hook, its writer and its
// checks go on as root throughout.
func (s *scenario) autoTLSAuth() {
	t := s.t
	auth := func(users []any) map[string]any {
		return map[string]any{"auth": map[string]any{
			"enabled": true,
			"roles":   []any{map[string]any{"name": "app-rw", "permissions": []any{map[string]any{"key": "/app/", "prefix": true, "type": "readwrite"}}}},
			"users":   users,
		}}
	}
	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, auth([]any{map[string]any{"name": "app", "roles": []any{"app-rw"}}})); err != nil {
		t.Fatal(err)
	}
	s.waitParent(90*time.Second, "authentication on, user app and role app-rw made", func(st ParentStatus) bool {
		progressing, _ := st.Condition("Progressing")
		return st.Auth != nil && st.Auth.Enabled && slices.Equal(st.Auth.Users, []string{"app"}) && st.Auth.Pending == "" && progressing == "False"
	})
	if t.Failed() {
		return
	}
	user := s.userClient("app")
	defer user.Close()
	put := func(key string) error {
		ctx, cancel := context.WithTimeout(s.env.Ctx(), 3*time.Second)
		defer cancel()
		_, err := user.Put(ctx, key, "x")
		return err
	}
	if err := put("/app/by-app"); err != nil {
		t.Errorf("user app, with its certificate, cannot write under /app/: %v", err)
	}
	if err := put("/elsewhere"); err == nil {
		t.Error("user app wrote outside /app/")
	}

	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, auth([]any{})); err != nil {
		t.Fatal(err)
	}
	s.waitParent(60*time.Second, "user app deleted", func(st ParentStatus) bool {
		return st.Auth != nil && len(st.Auth.Users) == 0 && st.Auth.Pending == ""
	})
	err := s.env.WaitFor(10*time.Second, "user app refused", func() (bool, string) {
		err := put("/app/after-removal")
		return err != nil, fmt.Sprintf("put: %v", err)
	})
	if err != nil {
		t.Errorf("a user dropped from spec.auth kept its access: %v", err)
	}
	if _, ok := s.env.API.Get(harness.Ref{Type: harness.TypeSecret, Namespace: ns, Name: exampleName + "-user-app"}); ok {
		t.Errorf("the Secret of the deleted user app is still there")
	}
}

// userClient calls the cluster with a user's certificate from its Secret.
func (s *scenario) userClient(user string) *clientv3.Client {
	t := s.t
	obj, ok := s.env.API.Get(harness.Ref{Type: harness.TypeSecret, Namespace: ns, Name: exampleName + "-user-" + user})
	if !ok {
		t.Fatalf("no Secret for user %s", user)
	}
	var sec corev1.Secret
	raw, _ := json.Marshal(obj)
	if err := json.Unmarshal(raw, &sec); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		t.Fatalf("user %s's Secret: %v", user, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(sec.Data["ca.crt"]) {
		t.Fatalf("user %s's Secret: ca.crt holds no certificate", user)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: s.c.MemberURLs(), DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// autoTLSBackupRestore: a backup run calls the members with the operator
// certificate the hook issued (an EtcdBackup with clusterName mounts it by
// itself), and an EtcdRestore brings the cluster back to it: its restored
// members mount the same Secrets and serve TLS as before.
func (s *scenario) autoTLSBackupRestore() {
	t := s.t
	b := &backupScenario{scenario: s, s3: s3test.Start(t)}
	b.s3.CreateBucket(t, backupBucket)
	b.createSecret("aws", s3test.AccessKey, s3test.SecretKey)
	put := func(key string) {
		cli, err := NewClient(s.c.ServiceURL())
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(s.env.Ctx(), 5*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, key, "x"); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put("/auto-tls/before-backup")
	b.createBackup("auto-tls-backup", b.s3Spec("auto-tls/backup.db", "aws"), nil)
	st := b.waitBackup("auto-tls-backup", 90*time.Second, "the backup of the auto-TLS cluster succeeded", func(st BackupStatus) bool {
		return st.Succeeded && st.LastBackup != nil
	})
	t.Logf("auto TLS: backup %s at revision %d", st.LastBackup.Location, st.LastBackup.Revision)
	put("/auto-tls/after-backup")

	b.applyRestore(exampleName, b.restoreSpec(exampleName, "auto-tls/backup.db"))
	b.waitRestore(exampleName, 3*time.Minute, "the restore completed", func(v restoreView) bool { return v.Cluster.Restore.Phase == "Completed" })
	cli, err := NewClient(s.c.MemberURLs()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(s.env.Ctx(), 10*time.Second)
	defer cancel()
	for key, want := range map[string]int64{"/auto-tls/before-backup": 1, "/auto-tls/after-backup": 0} {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatalf("restored cluster, over TLS: get %s: %v", key, err)
		}
		if resp.Count != want {
			t.Errorf("restored cluster: %s found %d times, want %d (the backup's state)", key, resp.Count, want)
		}
	}
}

// autoTLSSecretsOwned: four Secret children, controlled by the cluster,
// and a status that lists five certificates with CertificatesReady True.
func (s *scenario) autoTLSSecretsOwned() {
	t := s.t
	for _, suffix := range []string{"-ca", "-peer-tls", "-server-tls", "-operator-tls"} {
		obj, ok := s.env.API.Get(harness.Ref{Type: harness.TypeSecret, Namespace: ns, Name: exampleName + suffix})
		if !ok {
			t.Errorf("Secret %s%s was not rendered", exampleName, suffix)
			continue
		}
		var sec corev1.Secret
		raw, _ := json.Marshal(obj)
		_ = json.Unmarshal(raw, &sec)
		if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].Name != exampleName || sec.OwnerReferences[0].Controller == nil || !*sec.OwnerReferences[0].Controller {
			t.Errorf("Secret %s: ownerReferences %+v, want the EtcdCluster as controller (deleted with it)", sec.Name, sec.OwnerReferences)
		}
	}
	st := s.waitParent(30*time.Second, "CertificatesReady True and five certificates in status.TLS", func(st ParentStatus) bool {
		status, _ := st.Condition("CertificatesReady")
		return status == "True" && st.TLS != nil && len(st.TLS.Certificates) == 5
	})
	for _, c := range st.TLS.Certificates {
		if c.NotAfter.IsZero() || c.RenewAt == nil || !c.RenewAt.Before(c.NotAfter) {
			t.Errorf("status.TLS certificate %+v: want notAfter and a renewAt before it", c)
		}
	}
}

// autoTLSRefusesStrangers: the members answer the operator certificate on
// https, and refuse plaintext, a client without a certificate, one with a
// certificate of another CA, and the operator's own certificate on the
// peer port (a client CA's certificate is no peer's).
func (s *scenario) autoTLSRefusesStrangers(trust *secretTrust) {
	t := s.t
	other, err := tlstest.NewCA("another ca")
	if err != nil {
		t.Fatal(err)
	}
	strangerPair, err := other.ClientPair("stranger")
	if err != nil {
		t.Fatal(err)
	}
	noCert := trust.config()
	noCert.GetClientCertificate = nil
	withStranger := trust.config()
	withStranger.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &strangerPair, nil }

	member := s.c.PodNames()[0]
	httpsURL := s.c.MemberURL(member)
	plainURL := fmt.Sprintf("http://%s.%s.%s.svc:2379", member, exampleName, ns)
	for _, tc := range []struct {
		name, endpoint string
		cfg            *tls.Config
		wantOK         bool
	}{
		{"the operator certificate", httpsURL, trust.config(), true},
		{"plaintext", plainURL, nil, false},
		{"TLS without a client certificate", httpsURL, noCert, false},
		{"a certificate of another CA", httpsURL, withStranger, false},
	} {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{tc.endpoint}, TLS: tc.cfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			if tc.wantOK {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		ctx, cancel := context.WithTimeout(s.env.Ctx(), 3*time.Second)
		_, putErr := cli.Put(ctx, "/auto-tls/"+tc.name, "x")
		cancel()
		_ = cli.Close()
		if tc.wantOK && putErr != nil {
			t.Errorf("%s: put failed: %v", tc.name, putErr)
		}
		if !tc.wantOK && putErr == nil {
			t.Errorf("%s: put succeeded, want it refused", tc.name)
		}
	}
	peer := fmt.Sprintf("%s.%s.%s.svc:2380", member, exampleName, ns)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", peer, trust.config())
	if err == nil {
		// TLS 1.3 reports a refused client certificate on the first read.
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Errorf("the peer port took the operator's client certificate (%v): peers must accept only the peer CA's", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// autoTLSRotations: under a writer through the client Service, two leaf
// renewals (the hook's, every 15 s) and a CA rotation asked for with the
// annotation. No put fails and none is lost; leaf renewals restart no
// member; the CA rotation restarts each member once, on its claim, with
// the same member ID.
func (s *scenario) autoTLSRotations(trust *secretTrust) {
	t := s.t
	s.startFaultWriter("auto-tls-rotations")
	s.waitWrites(writesAround)
	attempts, acked := s.w.Counts()
	from := time.Now()
	since := len(s.loggedActions())
	world := s.world(s.c.PodNames())
	pods := s.c.Pods()

	// Two leaf renewals: the server certificate a member serves changes
	// twice, and no Pod restarts.
	member := pods[0].Name
	first := s.servedServerSerial(trust, member)
	seen := 0
	last := first
	err := s.env.WaitFor(3*time.Minute, "two renewals of the served server certificate", func() (bool, string) {
		if got := s.servedServerSerial(trust, member); got != "" && got != last {
			seen++
			last = got
		}
		return seen >= 2, fmt.Sprintf("%d renewals seen", seen)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.c.Pods() {
		before := podByName(pods, p.Name)
		if p.UID != before.UID || p.Restarts != before.Restarts {
			t.Errorf("leaf renewal: Pod %s restarted (uid %s → %s, restarts %d → %d); want none", p.Name, before.UID, p.UID, before.Restarts, p.Restarts)
		}
	}

	// A CA rotation, asked for.
	_, before, _ := s.c.Parent()
	oldCA := certificateNotAfter(before, "peer-ca")
	oldOperator, err := trust.data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.env.MC.AnnotateParent(ns, exampleName, annotationRotateCA, "e2e-"+time.Now().UTC().Format("150405")); err != nil {
		t.Fatal(err)
	}
	s.waitParent(4*time.Minute, "a new CA, every member restarted to trust it, and the rotation over", func(st ParentStatus) bool {
		status, _ := st.Condition("CertificatesReady")
		ready, _ := st.Condition("Ready")
		return status == "True" && ready == "True" && st.TLS != nil && st.TLS.CARotation == "" && certificateNotAfter(st, "peer-ca") != oldCA
	})
	if t.Failed() {
		return
	}
	s.waitWrites(writesAround)
	attemptsAfter, ackedAfter := s.w.Counts()
	failed := (attemptsAfter - attempts) - (ackedAfter - acked)
	if n := s.putsFailedAwayFromHandovers("two leaf renewals and a CA rotation", from, failed, s.loggedActions()[since:]); n != 0 {
		t.Errorf("two leaf renewals and a CA rotation: %d of %d puts failed away from a leadership handover, want none", n, attemptsAfter-attempts)
	}
	s.checkWorld("auto TLS: CA rotation", faultWorld{Members: world.Members, Pods: s.podUIDs()}, s.c.PodNames())
	for _, p := range s.c.Pods() {
		if podByName(pods, p.Name).UID == p.UID {
			t.Errorf("CA rotation: Pod %s was not restarted, so its etcd does not trust the new CA", p.Name)
		}
	}
	s.refusedAfterRotation(trust, oldOperator)
	s.verifyWrites("auto TLS: two leaf renewals and a CA rotation")
	t.Logf("auto TLS: %d handshakes verified against the bundle of the moment", trust.handshakes.Load())
}

func certificateNotAfter(st ParentStatus, name string) time.Time {
	if st.TLS == nil {
		return time.Time{}
	}
	for _, c := range st.TLS.Certificates {
		if c.Name == name {
			return c.NotAfter
		}
	}
	return time.Time{}
}

// servedServerSerial is the serial of the server certificate the member
// serves on 2379 at a new handshake, "" when it does not answer.
func (s *scenario) servedServerSerial(trust *secretTrust, member string) string {
	host := fmt.Sprintf("%s.%s.%s.svc", member, exampleName, ns)
	cfg := trust.config()
	cfg.ServerName = host
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", host+":2379", cfg)
	if err != nil {
		return ""
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}
