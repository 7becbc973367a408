package etcdcluster

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// TLS of the members, the CoreOS operator's way: the Secrets that
// spec.TLS.static names are mounted whole (never with subPath, so that the
// kubelet's in-place updates reach the files, and etcd, which reads its
// leaf certificates on every handshake, serves a rotated one without a
// restart), at the paths the CoreOS operator used.
const (
	peerTLSVolume   = "member-peer-tls"
	peerTLSDir      = "/etc/etcdtls/member/peer-tls"
	serverTLSVolume = "member-server-tls"
	serverTLSDir    = "/etc/etcdtls/member/server-tls"
)

// Reasons of the TLS conditions.
const (
	// ReasonTLSSecretInvalid: a Secret spec.TLS names is missing, lacks a
	// key, or holds what does not parse.
	ReasonTLSSecretInvalid = "TLSSecretInvalid"
	// ReasonTLSChangeRefused: the running members serve otherwise than
	// spec.TLS asks.
	ReasonTLSChangeRefused = "TLSChangeRefused"
)

func (p *planner) addresses() plan.Addresses {
	c := *p.o.Cluster
	c.Spec = p.spec
	return plan.AddressesOf(&c)
}

// The member Secrets: where each is mounted, and the prefix of the etcd
// flags that point at it (--peer-cert-file for peers, --cert-file for
// clients, and so on).
var (
	peerTLS = memberSecret{
		SecretKeys: plan.SecretKeys{Field: "spec.TLS.static.member.peerSecret", Cert: v1beta2.PeerCertKey, Key: v1beta2.PeerKeyKey, CA: v1beta2.PeerCAKey},
		volume:     peerTLSVolume, dir: peerTLSDir, flagPrefix: "--peer-",
	}
	serverTLS = memberSecret{
		SecretKeys: plan.SecretKeys{Field: "spec.TLS.static.member.serverSecret", Cert: v1beta2.ServerCertKey, Key: v1beta2.ServerKeyKey, CA: v1beta2.ServerCAKey},
		volume:     serverTLSVolume, dir: serverTLSDir, flagPrefix: "--",
	}
)

type memberSecret struct {
	plan.SecretKeys
	volume, dir, flagPrefix string
}

// addTLS mounts the member Secrets and points etcd at them.
func addTLS(pod *corev1.Pod, names v1beta2.TLSSecretNames) {
	ctr := &pod.Spec.Containers[0]
	for _, m := range []struct {
		memberSecret
		name string
	}{{peerTLS, names.Peer}, {serverTLS, names.Server}} {
		if m.name == "" {
			continue
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: m.volume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: m.name},
		}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: m.volume, MountPath: m.dir, ReadOnly: true})
		ctr.Command = append(ctr.Command,
			m.flagPrefix+"client-cert-auth=true",
			m.flagPrefix+"cert-file="+m.dir+"/"+m.Cert,
			m.flagPrefix+"key-file="+m.dir+"/"+m.Key,
			m.flagPrefix+"trusted-ca-file="+m.dir+"/"+m.CA,
		)
	}
}

// podTLS is what a member Pod was rendered to serve: the Secrets it
// mounts for peers and for clients, "" for plain HTTP.
type podTLS struct{ peer, server string }

func (t podTLS) String() string {
	var parts []string
	if t.peer != "" {
		parts = append(parts, fmt.Sprintf("peers with Secret %q", t.peer))
	}
	if t.server != "" {
		parts = append(parts, fmt.Sprintf("clients with Secret %q", t.server))
	}
	if len(parts) == 0 {
		return "plain HTTP"
	}
	return "TLS to " + strings.Join(parts, " and ")
}

func observedPodTLS(pod *corev1.Pod) podTLS {
	var t podTLS
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		switch v.Name {
		case peerTLSVolume:
			t.peer = v.Secret.SecretName
		case serverTLSVolume:
			t.server = v.Secret.SecretName
		}
	}
	return t
}

// tlsChangeRefused says why the running members cannot be planned with
// the spec's TLS policy, or "". A member's peer URLs could be changed one
// at a time, but a member serving clients TLS while its peers do not, or
// the reverse, cuts the hook or the members off for the length of the
// roll; rather than risk a running cluster, the change is refused and the
// cluster left as it is until the spec matches it again (see the README).
func (p *planner) tlsChangeRefused() string {
	names := p.tlsNames()
	want := podTLS{peer: names.Peer, server: names.Server}
	for _, name := range sorted(keysOf(p.o.Pods)) {
		pod := p.o.Pods[name]
		got := observedPodTLS(pod)
		if got == want {
			continue
		}
		switch {
		case got == podTLS{}:
			return fmt.Sprintf("spec.TLS asks for %s, but member %s serves plain HTTP: TLS cannot be turned on for a running cluster. "+
				"Remove spec.TLS to go on as before, or restore a backup into a new cluster with spec.TLS", want, name)
		case want == podTLS{}:
			return fmt.Sprintf("member %s serves %s, and spec.TLS asks for none: TLS cannot be turned off for a running cluster. "+
				"Put spec.TLS back to go on as before", name, got)
		case !p.spec.TLS.IsAuto() && p.leavingAuto() && got == (podTLS{peer: p.o.Cluster.AutoTLSSecrets().Peer, server: p.o.Cluster.AutoTLSSecrets().Server}):
			// Moving to spec.TLS.static: see tlsmove.go.
			continue
		case p.spec.TLS.IsAuto():
			if from := movingFrom(p.o.Cluster); from != nil && got == (podTLS{peer: from.Member.PeerSecret, server: from.Member.ServerSecret}) {
				// Moving from spec.TLS.static: see tlsmove.go.
				continue
			}
			return fmt.Sprintf("member %s serves %s, and spec.TLS.auto asks for %s: a cluster moves from spec.TLS.static to spec.TLS.auto only from the Secrets status.TLS.static names, "+
				"with TLS for peers and clients and an operatorSecret. Put spec.TLS.static back to go on as before", name, got, want)
		case got == (podTLS{peer: p.o.Cluster.AutoTLSSecrets().Peer, server: p.o.Cluster.AutoTLSSecrets().Server}):
			return fmt.Sprintf("member %s serves %s, and spec.TLS.static asks for %s: a cluster moves from spec.TLS.auto to spec.TLS.static only with TLS for peers and clients and an operatorSecret, "+
				"while the hook's CA Secret %q exists. Put spec.TLS.auto back to go on as before", name, got, want, p.o.Cluster.AutoTLSSecrets().CA)
		default:
			return fmt.Sprintf("member %s serves %s, and spec.TLS asks for %s: a running member's Secrets cannot be swapped. "+
				"Put spec.TLS back, and rotate certificates by updating the Secrets in place", name, got, want)
		}
	}
	return ""
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// namedSecret is a Secret spec.TLS names, with the host names its leaf
// must carry: members check their peers' names, and the hook checks the
// members'.
type namedSecret struct {
	plan.SecretKeys
	name         string
	hostsToServe []string
}

func (p *planner) tlsSecrets() []namedSecret {
	c := p.o.Cluster
	t := p.tlsNames()
	if t.Peer == "" && t.Server == "" && t.Operator == "" {
		return nil
	}
	// Any member's name stands for all: the README asks for a wildcard.
	member := []string{plan.MemberHost(c.Name+"-"+strings.Repeat("x", SuffixLength), c.Name, c.Namespace, p.spec.Pod.ClusterDomainSuffix())}
	var out []namedSecret
	for _, s := range []namedSecret{
		{peerTLS.SecretKeys, t.Peer, member},
		{serverTLS.SecretKeys, t.Server, member},
		{plan.OperatorKeys, t.Operator, nil},
	} {
		if s.name != "" {
			out = append(out, s)
		}
	}
	return out
}

// tlsSecretProblems checks every Secret spec.TLS names before a member
// mounts it or the hook calls with it: a member Pod that mounts a missing
// Secret waits in ContainerCreating and says so nowhere the hook sees, and
// one whose certificate does not parse never starts. Each problem names
// the Secret and the key.
func (p *planner) tlsSecretProblems() []string {
	var out []string
	for _, s := range p.tlsSecrets() {
		secret, ok := p.secret(s.name)
		if !ok {
			out = append(out, fmt.Sprintf("Secret %q (%s) not found in namespace %s (the cluster's customize hook relates it; is the CompositeController's customize hook set?)",
				s.name, s.Field, p.o.Cluster.Namespace))
			continue
		}
		if msg := plan.CheckTLSSecret(secret, s.SecretKeys, s.hostsToServe, p.o.Now); msg != "" {
			out = append(out, fmt.Sprintf("Secret %q (%s): %s", s.name, s.Field, msg))
		}
	}
	return out
}

// tlsNames are the cluster's TLS Secret names, worked out once a sync.
func (p *planner) tlsNames() v1beta2.TLSSecretNames {
	if !p.named {
		p.names, p.named = p.o.Cluster.TLSSecrets(), true
	}
	return p.names
}

// secret is the Secret of that name the request carries: a child (the
// Secrets of spec.TLS.auto), else a related object (spec.TLS.static's).
func (p *planner) secret(name string) (*corev1.Secret, bool) {
	if s, ok := p.o.SecretChildren[name]; ok {
		return s, true
	}
	s, ok := p.o.Secrets[name]
	return s, ok
}

// trustMarker is AnnotationTrustedCA of a member Pod rendered now; "" but
// with spec.TLS.auto.
func (p *planner) trustMarker() string {
	if p.certs == nil || p.certs.mountStatic {
		return ""
	}
	return p.certs.trust
}

// mountedSecrets are the TLS Secrets a member Pod rendered now mounts:
// spec.TLS's, but the hook's own while members move away from them to
// spec.TLS.static (see tlsmove.go).
func (p *planner) mountedSecrets() v1beta2.TLSSecretNames {
	if cs := p.certs; cs != nil && cs.leaving && !cs.mountStatic {
		return cs.names
	}
	return p.tlsNames()
}

// relatedSecretNames are the Secrets an EtcdCluster's sync needs to see:
// spec.TLS.static's, or the names spec.TLS.auto renders Secrets under (a
// Secret of that name that is not the cluster's child is reported, rather
// than fought over) and, while members move from spec.TLS.static, the
// Secrets status.TLS.static names.
func relatedSecretNames(c *v1beta2.EtcdCluster) []string {
	t := c.TLSSecrets()
	all := []string{t.CA, t.Peer, t.Server, t.Operator}
	if from := movingFrom(c); from != nil {
		// What the members run with while they move to spec.TLS.auto.
		all = append(all, from.Member.PeerSecret, from.Member.ServerSecret, from.OperatorSecret)
	}
	var names []string
	for _, n := range all {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}
