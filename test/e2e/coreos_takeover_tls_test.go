package e2e

import (
	"crypto/tls"
	"slices"
	"testing"

	"github.com/etcdhook/etcd-hook/internal/tlstest"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// TestTakeOverCoreOSTLSCluster: TestTakeOverCoreOSCluster for a cluster
// with spec.TLS.static, which the CoreOS operator ran with its own mounts
// (/etc/etcdtls/...) and a probe calling https://localhost with the
// operator Secret's certificate. Under a writer with a client certificate:
//   - the cluster is taken over as it is: Adopted, the same Pods (UIDs, 0
//     restarts) and member IDs, no membership change, and the hook calls
//     the members with the operator Secret's certificate;
//   - the rollout annotation moves every member onto the hook's own Pods,
//     which mount the two member Secrets at the same paths;
//   - a client without a certificate is refused throughout, and every
//     acknowledged write is there at the end.
func TestTakeOverCoreOSTLSCluster(t *testing.T) {
	longTail(t, "the TLS form of TestTakeOverCoreOSCluster: the same adoption and move, with the CoreOS operator's TLS mounts and probe")
	s := newFaultScenario(t, harness.Options{ClusterCustomize: true})
	env := s.env
	ca, err := tlstest.NewCA("coreos etcd ca")
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := ca.IssueCluster(exampleName, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	putSecret(t, env, tlsPeerSecret, secrets.Peer)
	putSecret(t, env, tlsServerSecret, secrets.Server)
	putSecret(t, env, tlsOperatorSecret, secrets.Client)
	app, err := ca.ClientPair("app")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(UseClientTLS(exampleName, ns, ca.ClientConfig(app)))

	coreos := newCoreOSCluster(s, map[string]any{"size": 3, "version": faultVersion, "TLS": tlsSpec},
		&harness.CoreOSTLS{PeerSecret: tlsPeerSecret, ServerSecret: tlsServerSecret, OperatorSecret: tlsOperatorSecret})
	coreos.seed()
	coreos.grow(2)
	members := coreos.members
	coreos.writeStatus(members)

	s.startFaultWriter("coreos-tls")
	s.waitWrites(writesAround)
	before := s.world(members)
	logged := len(s.loggedActions())
	noCert := ca.ClientConfig()
	s.checkCertificateRequired("run by the CoreOS operator", members, noCert)

	coreos.migrate()
	if !coreos.waitTakenOver(before, logged) || !coreos.moveToHookPods(3) {
		return
	}
	for _, name := range s.c.PodNames() {
		pod, ok := env.API.Get(harness.Ref{Type: harness.TypePod, Namespace: ns, Name: name})
		if !ok {
			t.Errorf("moved: Pod %s is gone", name)
			continue
		}
		// The hook's member mounts the two member Secrets; the operator
		// Secret, which only the CoreOS probe read, is no longer mounted.
		if got, want := mountedSecrets(pod), []string{tlsPeerSecret, tlsServerSecret}; !slices.Equal(got, want) {
			t.Errorf("moved: Pod %s mounts the Secrets %v, want %v", name, got, want)
		}
	}
	s.checkCertificateRequired("moved onto the hook's Pods", s.c.PodNames(), noCert)
	s.verifyWrites("the CoreOS TLS cluster taken over and moved")
}

// mountedSecrets are the Secrets a Pod's volumes name, sorted.
func mountedSecrets(pod harness.Object) []string {
	spec, _ := pod["spec"].(map[string]any)
	volumes, _ := spec["volumes"].([]any)
	var names []string
	for _, v := range volumes {
		vol, _ := v.(map[string]any)
		if secret, ok := vol["secret"].(map[string]any); ok {
			name, _ := secret["secretName"].(string)
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// checkCertificateRequired checks that each member refuses a client that
// trusts its CA and presents no certificate (noCert).
func (s *scenario) checkCertificateRequired(step string, members []string, noCert *tls.Config) {
	t := s.t
	t.Helper()
	for _, m := range members {
		if err := s.putAt(s.c.MemberURL(m), noCert); err == nil {
			t.Errorf("%s: member %s accepted a put from a client without a certificate", step, m)
		}
	}
}
