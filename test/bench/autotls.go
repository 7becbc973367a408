package bench

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// issueAutoClusterTLS is issueClusterTLS for spec.TLS.auto: the hook's
// planner issues the CAs and the leaves, as its first two syncs of a new
// cluster do, and the Secrets come back as the request's Secret children,
// with the UIDs and resourceVersions the API server gives them; the seed
// Pod is the planner's third answer.
func issueAutoClusterTLS(cluster, namespace, uid, version string) (*clusterTLS, error) {
	c := &v1beta2.EtcdCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta2.APIVersion, Kind: v1beta2.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: cluster, Namespace: namespace, UID: types.UID(uid), Generation: 1},
		Spec:       v1beta2.ClusterSpec{Size: 3, Version: version, TLS: &v1beta2.TLSPolicy{Auto: &v1beta2.AutoTLS{}}},
	}
	o := &etcdcluster.Observed{
		Cluster: c, Pods: map[string]*corev1.Pod{}, Services: map[string]*corev1.Service{}, PVCs: map[string]*corev1.PersistentVolumeClaim{},
		SecretChildren: map[string]*corev1.Secret{}, Now: time.Now(), FreshSuffix: "bench",
	}
	created := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	ct := &clusterTLS{policy: c.Spec.TLS, auto: true}
	for sync := range 3 {
		d := etcdcluster.Plan(o)
		if sync == 2 {
			seed := etcdcluster.SeedName(cluster, uid)
			for _, child := range d.Children {
				if pod, ok := child.Object.(*corev1.Pod); ok && child.Name == seed {
					ct.seedPod = pod
				}
			}
			break
		}
		for _, child := range d.Children {
			s, ok := child.Object.(*corev1.Secret)
			if !ok {
				continue
			}
			s = s.DeepCopy()
			s.UID, s.ResourceVersion, s.CreationTimestamp = uidOf("secret/"+uid+"/"+s.Name), strconv.Itoa(4711+sync), created
			o.SecretChildren[s.Name] = s
		}
	}
	if ct.seedPod == nil {
		return nil, fmt.Errorf("%s: the planner rendered no seed Pod once its certificates were issued", cluster)
	}
	for _, s := range o.SecretChildren {
		ct.secrets = append(ct.secrets, s)
	}
	server := o.SecretChildren[c.TLSSecrets().Server]
	if server == nil {
		return nil, fmt.Errorf("%s: no server Secret issued", cluster)
	}
	ct.server = server.Data
	var err error
	if ct.serverCert, err = tls.X509KeyPair(server.Data[v1beta2.ServerCertKey], server.Data[v1beta2.ServerKeyKey]); err != nil {
		return nil, err
	}
	ct.clientCAs = x509.NewCertPool()
	if !ct.clientCAs.AppendCertsFromPEM(server.Data[v1beta2.ServerCAKey]) {
		return nil, fmt.Errorf("%s: no CA in %s", cluster, v1beta2.ServerCAKey)
	}
	return ct, nil
}

// trust is the annotation of CA trust the seed was rendered with, which
// every member Pod of an auto-TLS cluster carries; "" otherwise.
func (ct *clusterTLS) trust() string {
	if ct == nil || ct.seedPod == nil {
		return ""
	}
	return ct.seedPod.Annotations[etcdcluster.AnnotationTrustedCA]
}
