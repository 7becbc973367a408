package bench

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// clusterTLS is what a cluster with spec.TLS brings to a benchmark: the
// three Secrets of the CoreOS policy, issued by a CA of its own, as the
// sync request relates them; the members' server certificate, for an etcd
// that serves them; and what the planner renders into each member Pod for
// them (the https URLs, the Secret volumes and their mounts).
type clusterTLS struct {
	policy *v1beta2.TLSPolicy
	// auto: the hook issued the Secrets (spec.TLS.auto), which the request
	// carries as children; otherwise the user did, and they are related.
	auto bool
	// secrets are as the API server sends them to Metacontroller: with a
	// UID and a resourceVersion, which the hook keys its parsed
	// certificates by.
	secrets []*corev1.Secret
	// server is the data of the server Secret (server.crt, server.key,
	// server-ca.crt), which the members serve clients with.
	server map[string][]byte
	// serverCert and clientCAs are that Secret parsed, for etcdSim.
	serverCert tls.Certificate
	clientCAs  *x509.CertPool
	// seedPod is the planner's rendering of the cluster's seed Pod; each
	// member's Pod is it renamed (memberTLS).
	seedPod *corev1.Pod
}

// issueClusterTLS issues a CA and the CoreOS Secrets of one cluster, the
// members' certificates naming *.<cluster>.<namespace>.svc as the README
// asks, and renders its seed Pod with the planner.
func issueClusterTLS(cluster, namespace, uid, version string) (*clusterTLS, error) {
	ca, err := tlstest.NewCA(cluster + " ca")
	if err != nil {
		return nil, err
	}
	data, err := ca.IssueCluster(cluster, namespace, "")
	if err != nil {
		return nil, err
	}
	names := map[string]string{"peer": cluster + "-peer-tls", "server": cluster + "-server-tls", "client": cluster + "-client-tls"}
	ct := &clusterTLS{
		policy: &v1beta2.TLSPolicy{Static: &v1beta2.StaticTLS{
			Member:         &v1beta2.MemberSecret{PeerSecret: names["peer"], ServerSecret: names["server"]},
			OperatorSecret: names["client"],
		}},
		server: data.Server,
	}
	created := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	for _, s := range []struct {
		name string
		data map[string][]byte
	}{{names["peer"], data.Peer}, {names["server"], data.Server}, {names["client"], data.Client}} {
		ct.secrets = append(ct.secrets, &corev1.Secret{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{
				Name: s.name, Namespace: namespace, UID: uidOf("secret/" + uid + "/" + s.name),
				ResourceVersion: "4711", CreationTimestamp: created,
			},
			Type: corev1.SecretTypeOpaque,
			Data: s.data,
		})
	}
	if ct.serverCert, err = tls.X509KeyPair(data.Server[v1beta2.ServerCertKey], data.Server[v1beta2.ServerKeyKey]); err != nil {
		return nil, err
	}
	ct.clientCAs = x509.NewCertPool()
	if !ct.clientCAs.AppendCertsFromPEM(data.Server[v1beta2.ServerCAKey]) {
		return nil, fmt.Errorf("%s: no CA in %s", cluster, v1beta2.ServerCAKey)
	}
	if ct.seedPod, err = ct.renderSeed(cluster, namespace, uid, version); err != nil {
		return nil, err
	}
	return ct, nil
}

// renderSeed is the planner's answer to a new cluster of this policy: its
// seed Pod, as the hook renders it.
func (ct *clusterTLS) renderSeed(cluster, namespace, uid, version string) (*corev1.Pod, error) {
	c := &v1beta2.EtcdCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta2.APIVersion, Kind: v1beta2.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: cluster, Namespace: namespace, UID: types.UID(uid), Generation: 1},
		Spec:       v1beta2.ClusterSpec{Size: 3, Version: version, TLS: ct.policy},
	}
	secrets := map[string]*corev1.Secret{}
	for _, s := range ct.secrets {
		secrets[s.Name] = s
	}
	d := etcdcluster.Plan(&etcdcluster.Observed{
		Cluster: c, Pods: map[string]*corev1.Pod{}, Services: map[string]*corev1.Service{}, PVCs: map[string]*corev1.PersistentVolumeClaim{},
		Secrets: secrets, Now: time.Now(), FreshSuffix: "bench",
	})
	seed := etcdcluster.SeedName(cluster, uid)
	for _, child := range d.Children {
		if pod, ok := child.Object.(*corev1.Pod); ok && child.Name == seed {
			return pod, nil
		}
	}
	return nil, fmt.Errorf("%s: the planner rendered no seed Pod (status %+v)", cluster, d.Status.Conditions)
}

// memberTLS is what the planner renders into member's Pod for TLS, taken
// from the seed's rendering renamed: the etcd command (https URLs
// advertised, certificate flags), and the Secret volumes and their mounts,
// as JSON values to put into a Pod of the request.
func (ct *clusterTLS) memberTLS(member string) (command, volumes, mounts []any) {
	seed := ct.seedPod.Name
	for _, arg := range ct.seedPod.Spec.Containers[0].Command {
		switch {
		case strings.HasPrefix(arg, "--name="):
			arg = "--name=" + member
		case strings.HasPrefix(arg, "--initial-cluster="):
			arg = "--initial-cluster=" + member + "=" + strings.TrimPrefix(arg, "--initial-cluster="+seed+"=")
			arg = strings.ReplaceAll(arg, "//"+seed+".", "//"+member+".")
		default:
			arg = strings.ReplaceAll(arg, "//"+seed+".", "//"+member+".")
		}
		command = append(command, arg)
	}
	secretVolumes := map[string]bool{}
	for _, v := range ct.seedPod.Spec.Volumes {
		if v.Secret != nil {
			secretVolumes[v.Name] = true
			volumes = append(volumes, asJSONValue(v))
		}
	}
	for _, m := range ct.seedPod.Spec.Containers[0].VolumeMounts {
		if secretVolumes[m.Name] {
			mounts = append(mounts, asJSONValue(m))
		}
	}
	return command, volumes, mounts
}

// related are the Secrets as the request's related objects carry them.
func (ct *clusterTLS) related() map[string]any {
	out := map[string]any{}
	for _, s := range ct.secrets {
		out[s.Name] = asJSONValue(s)
	}
	return out
}

// uidOf is a stable UID, shaped as the API server's, drawn from a name.
func uidOf(name string) types.UID {
	h := sha256.Sum256([]byte(name))
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]))
}

// asJSONValue is v as encoding/json decodes it into an any.
func asJSONValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}
