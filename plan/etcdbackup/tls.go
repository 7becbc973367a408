package etcdbackup

import (
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// ReasonClientTLSMissing: the cluster serves clients TLS, and neither
// spec.clientTLSSecret nor the EtcdCluster's operatorSecret names a client
// certificate to call it with.
const ReasonClientTLSMissing = "ClientTLSMissing"

// The client Secret is mounted whole (never with subPath, so that a
// rotated certificate reaches a run that starts after it) at tlsDir, and
// the agent is pointed at its keys.
const (
	tlsDir    = "/etc/etcd-backup/etcd-tls"
	tlsVolume = "etcd-tls"
)

// clientTLS is the Secret a run calls members that serve TLS with.
type clientTLS struct {
	secret string
	// optional: the Secret is the EtcdCluster's operatorSecret, which the
	// backup's customize hook cannot relate (it sees the EtcdBackup
	// alone), so the hook cannot check it before the run. It is mounted
	// optionally, so that a missing one is an empty directory the agent
	// reports, naming the Secret, rather than a Pod waiting in
	// ContainerCreating and saying why nowhere the hook sees.
	optional bool
}

// clientTLSFor picks the client certificate of a run: spec.clientTLSSecret
// (CoreOS), else the operatorSecret of the EtcdCluster clusterName names,
// if it serves clients TLS. An https endpoint with neither is a reason
// not to run: the run could only fail, after starting a Pod.
func (p *planner) clientTLSFor(endpoints []string, cluster *v1beta2.EtcdCluster) (*clientTLS, string, string) {
	if name := p.o.Backup.Spec.ClientTLSSecret; name != "" {
		return &clientTLS{secret: name}, "", ""
	}
	if cluster != nil && cluster.Spec.TLS.IsSecureClient() {
		if name := operatorSecretOf(cluster); name != "" {
			return &clientTLS{secret: name, optional: true}, "", ""
		}
	}
	for _, ep := range endpoints {
		if u, err := url.Parse(ep); err != nil || u.Scheme != "https" {
			continue
		}
		what := fmt.Sprintf("etcd endpoint %s (spec.etcdEndpoints) serves TLS, and no client certificate is named", ep)
		if cluster != nil {
			what = fmt.Sprintf("EtcdCluster %q (spec.clusterName) serves clients TLS at %s, and no client certificate is named (its spec.TLS names no operatorSecret)", cluster.Name, ep)
		}
		return nil, ReasonClientTLSMissing, fmt.Sprintf("%s: set spec.clientTLSSecret to a Secret with the keys %s", what, clientTLSKeys())
	}
	return nil, "", ""
}

// operatorSecretOf is the Secret of the operator certificate the cluster's
// status lists, which is the one the hook calls its members with; else the
// one its spec names. They differ while the members move between
// spec.TLS.static and spec.TLS.auto, when the hook's own certificate is
// the one every member trusts.
func operatorSecretOf(cluster *v1beta2.EtcdCluster) string {
	if st := cluster.Status.TLS; st != nil {
		for _, c := range st.Certificates {
			if c.Name == "operator" && c.Secret != "" {
				return c.Secret
			}
		}
	}
	return cluster.TLSSecrets().Operator
}

// checkClientTLS looks at spec.clientTLSSecret before a run mounts it, as
// checkDestination looks at the S3 Secret. The operatorSecret, mounted
// optionally, is the agent's to check.
func (p *planner) checkClientTLS(t *clientTLS) (reason, msg string) {
	if t == nil || t.optional {
		return "", ""
	}
	s, ok := p.o.Secrets[t.secret]
	if !ok {
		return ReasonSecretInvalid, fmt.Sprintf("Secret %q (spec.clientTLSSecret) not found in namespace %s", t.secret, p.o.Backup.Namespace)
	}
	if msg := plan.CheckClientSecret(s, p.o.Now); msg != "" {
		return ReasonSecretInvalid, fmt.Sprintf("Secret %q (spec.clientTLSSecret): %s: it must hold %s", t.secret, msg, clientTLSKeys())
	}
	return "", ""
}

func clientTLSKeys() string {
	return fmt.Sprintf("%q, %q and %q", v1beta2.ClientCertKey, v1beta2.ClientKeyKey, v1beta2.ClientCAKey)
}

// addClientTLS mounts the client Secret into a run Pod and points the
// agent at its files (etcdctl's flag names).
func addClientTLS(pod *corev1.Pod, t *clientTLS) {
	if t == nil {
		return
	}
	src := &corev1.SecretVolumeSource{SecretName: t.secret}
	if t.optional {
		src.Optional = ptr(true)
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: tlsVolume, VolumeSource: corev1.VolumeSource{Secret: src}})
	ctr := &pod.Spec.Containers[0]
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: tlsVolume, MountPath: tlsDir, ReadOnly: true})
	ctr.Args = append(ctr.Args,
		"--cert="+tlsDir+"/"+v1beta2.ClientCertKey,
		"--key="+tlsDir+"/"+v1beta2.ClientKeyKey,
		"--cacert="+tlsDir+"/"+v1beta2.ClientCAKey,
		"--tls-secret="+t.secret,
	)
}
