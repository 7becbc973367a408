package harness

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The objects the CoreOS etcd-operator v0.9.4 creates for a cluster, plain
// or with spec.TLS.static (CoreOSTLS), rendered as it rendered them (pkg/util/k8sutil: newEtcdPod,
// applyPodPolicy without a pod policy, addOwnerRefToObject, NewEtcdPodPVC,
// CreateClientService, CreatePeerService; pkg/util/etcdutil/member.go for
// the URLs), so that a test can leave a cluster exactly as that operator
// did and check that the hook takes it over. The kubelet runs such Pods:
// their check-dns init container (checkdns.go), their etcd container and
// their `etcdctl endpoint status` exec probes (probes_exec.go).
//
// Like the operator, these carry no controller-uid label: Metacontroller
// releases them until someone labels them (metacontroller_claim.go).

const (
	// CoreOSRepository is the operator's default etcd image repository.
	CoreOSRepository = "quay.io/coreos/etcd"
	// CoreOSBusyboxImage is the operator's default image of check-dns.
	CoreOSBusyboxImage = "busybox:1.28.0-glibc"
	// CoreOSVersionAnnotation is where the operator records a member's
	// etcd version on its Pod.
	CoreOSVersionAnnotation = "etcd.version"
	// CoreOSTolerateUnreadyAnnotation is on both of its Services. No
	// Kubernetes since 1.24 reads it (nor any EndpointSlice controller),
	// and neither does the harness: see StrictDNS.
	CoreOSTolerateUnreadyAnnotation = "service.alpha.kubernetes.io/tolerate-unready-endpoints"
)

// OwnerRef is one metadata.ownerReferences entry.
type OwnerRef struct {
	APIVersion, Kind, Name, UID    string
	Controller, BlockOwnerDeletion bool
}

func (o OwnerRef) meta() metav1.OwnerReference {
	r := metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: types.UID(o.UID)}
	if o.Controller {
		r.Controller = new(true)
	}
	if o.BlockOwnerDeletion {
		r.BlockOwnerDeletion = new(true)
	}
	return r
}

// CoreOSOwnerRef is what the operator's EtcdCluster.AsOwner returns for a
// cluster object: apiVersion etcd.database.coreos.com/v1beta2, kind
// EtcdCluster, its name and uid, controller: true, and no
// blockOwnerDeletion. Every object below carries it.
func CoreOSOwnerRef(cluster Object) OwnerRef {
	return OwnerRef{
		APIVersion: "etcd.database.coreos.com/v1beta2", Kind: "EtcdCluster",
		Name: nestedString(cluster, "metadata", "name"), UID: nestedString(cluster, "metadata", "uid"),
		Controller: true,
	}
}

// coreosNameChars are the characters of utilrand.String.
const coreosNameChars = "bcdfghjklmnpqrstvwxz2456789"

// CoreOSMemberName is a new member name as UniqueMemberName makes it:
// <cluster>-<10 random characters>, the cluster name cut to 52 characters.
func CoreOSMemberName(cluster string) string {
	if len(cluster) > 52 {
		cluster = cluster[:52]
	}
	b := make([]byte, 10)
	for i := range b {
		b[i] = coreosNameChars[rand.IntN(len(coreosNameChars))]
	}
	return cluster + "-" + string(b)
}

// CoreOSMemberAddr is a member's DNS name, Member.Addr:
// <member>.<cluster>.<namespace>.svc, the cluster being the member name up
// to its last "-", as the operator derives it. It panics on a name without
// one, as the operator does.
func CoreOSMemberAddr(namespace, member string) string {
	i := strings.LastIndexByte(member, '-')
	if i < 0 {
		panic(fmt.Sprintf("unexpected member name: %s", member))
	}
	return fmt.Sprintf("%s.%s.%s.svc", member, member[:i], namespace)
}

// CoreOSPeerURL is a member's peer URL, http://<addr>:2380.
func CoreOSPeerURL(namespace, member string) string {
	return "http://" + CoreOSMemberAddr(namespace, member) + ":2380"
}

// CoreOSClientURL is a member's client URL, http://<addr>:2379.
func CoreOSClientURL(namespace, member string) string {
	return "http://" + CoreOSMemberAddr(namespace, member) + ":2379"
}

// CoreOSPeerURLPair is one entry of --initial-cluster, <member>=<peer URL>,
// as MemberSet.PeerURLPairs renders it.
func CoreOSPeerURLPair(namespace, member string) string {
	return member + "=" + CoreOSPeerURL(namespace, member)
}

// CoreOSTLS is an EtcdCluster's spec.TLS.static as the operator rendered
// a member from it (SecurePeer and SecureClient both: the CRD's full TLS
// policy): the Secrets each member mounts.
type CoreOSTLS struct {
	PeerSecret, ServerSecret, OperatorSecret string
}

// CoreOSTLSPeerURL is a member's peer URL with TLS, https://<addr>:2380.
func CoreOSTLSPeerURL(namespace, member string) string {
	return "https://" + CoreOSMemberAddr(namespace, member) + ":2380"
}

// CoreOSTLSClientURL is a member's client URL with TLS, https://<addr>:2379.
func CoreOSTLSClientURL(namespace, member string) string {
	return "https://" + CoreOSMemberAddr(namespace, member) + ":2379"
}

// CoreOSTLSPeerURLPair is one entry of --initial-cluster with TLS.
func CoreOSTLSPeerURLPair(namespace, member string) string {
	return member + "=" + CoreOSTLSPeerURL(namespace, member)
}

// The operator's mount points of the member's TLS Secrets
// (pkg/util/k8sutil), and the operator Secret's file names
// (pkg/util/etcdutil/tls.go), which its TLS probe reads.
const (
	coreosPeerTLSDir      = "/etc/etcdtls/member/peer-tls"
	coreosServerTLSDir    = "/etc/etcdtls/member/server-tls"
	coreosOperatorTLSDir  = "/etc/etcdtls/operator/etcd-tls"
	coreosPeerTLSVolume   = "member-peer-tls"
	coreosServerTLSVolume = "member-server-tls"
	coreosOperatorVolume  = "etcd-client-tls"
)

// coreosCheckDNSScript is the check-dns script of v0.9.4, byte for byte.
func coreosCheckDNSScript(timeout int64, addr string) string {
	return fmt.Sprintf("\n\t\t\t\t\tTIMEOUT_READY=%d\n\t\t\t\t\twhile ( ! nslookup %s )\n\t\t\t\t\tdo\n"+
		"\t\t\t\t\t\t# If TIMEOUT_READY is 0 we should never time out and exit \n"+
		"\t\t\t\t\t\tTIMEOUT_READY=$(( TIMEOUT_READY-1 ))\n"+
		"                        if [ $TIMEOUT_READY -eq 0 ];\n"+
		"\t\t\t\t        then\n"+
		"\t\t\t\t            echo \"Timed out waiting for DNS entry\"\n"+
		"\t\t\t\t            exit 1\n"+
		"\t\t\t\t        fi\n"+
		"\t\t\t\t\t\tsleep 1\n"+
		"\t\t\t\t\tdone", timeout, addr)
}

// coreosProbe is newEtcdProbe(secure).
func coreosProbe(secure bool) *corev1.Probe {
	cmd := "ETCDCTL_API=3 etcdctl endpoint status"
	if secure {
		cmd = fmt.Sprintf("ETCDCTL_API=3 etcdctl --endpoints=https://localhost:2379 --cert=%[1]s/etcd-client.crt --key=%[1]s/etcd-client.key --cacert=%[1]s/etcd-client-ca.crt endpoint status", coreosOperatorTLSDir)
	}
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
			Command: []string{"/bin/sh", "-ec", cmd},
		}},
		InitialDelaySeconds: 10,
		TimeoutSeconds:      10,
		PeriodSeconds:       60,
		FailureThreshold:    3,
	}
}

func coreosLabels(cluster string) map[string]string {
	return map[string]string{"etcd_cluster": cluster, "app": "etcd"}
}

// CoreOSMemberPod renders a member Pod as NewEtcdPod did for a cluster
// without TLS and without spec.pod (or with only a claim spec in it):
//
//   - name and hostname member, subdomain cluster, labels app: etcd,
//     etcd_node: <member>, etcd_cluster: <cluster>, annotation
//     etcd.version: <version>, the owner reference (CoreOSOwnerRef);
//   - init container check-dns (busybox:1.28.0-glibc) waiting, without
//     time limit, for CoreOSMemberAddr to resolve;
//   - container etcd, image quay.io/coreos/etcd:v<version>, command
//     /usr/local/bin/etcd --data-dir=/var/etcd/data --name=<member>
//     --initial-advertise-peer-urls=<peer URL>
//     --listen-peer-urls=http://0.0.0.0:2380
//     --listen-client-urls=http://0.0.0.0:2379
//     --advertise-client-urls=<client URL>
//     --initial-cluster=<initialCluster joined by ","> --initial-cluster-state=<state>
//     and, with state "new" only, --initial-cluster-token=<token>; ports
//     server 2380 and client 2379; the etcd-data volume on /var/etcd;
//     liveness `ETCDCTL_API=3 etcdctl endpoint status` (delay 10 s, timeout
//     10 s, period 60 s, failure threshold 3), readiness the same with delay
//     1 s, timeout 5 s, period 5 s;
//   - restartPolicy Never, automountServiceAccountToken false, the
//     etcd-data volume an emptyDir, or with claim the PVC of that name (the
//     operator names it after the member: CoreOSMemberClaim).
//
// version is the EtcdCluster's spec.version ("3.6.16"; a leading v is
// dropped). initialCluster lists <member>=<peer URL> pairs
// (CoreOSPeerURLPair): the seed alone with state "new", every member
// including this one with "existing".
func CoreOSMemberPod(cluster, namespace, member, version string, initialCluster []string, state, token string, owner OwnerRef, claim string) Object {
	return coreosMemberPod(cluster, namespace, member, version, initialCluster, state, token, owner, claim, nil)
}

// CoreOSTLSMemberPod renders a member Pod as NewEtcdPod did for a cluster
// with spec.TLS.static: as CoreOSMemberPod, with https peer and client
// URLs (initialCluster's pairs from CoreOSTLSPeerURLPair), the flags
//
//	--peer-client-cert-auth=true --peer-trusted-ca-file=<peer dir>/peer-ca.crt
//	--peer-cert-file=<peer dir>/peer.crt --peer-key-file=<peer dir>/peer.key
//	--client-cert-auth=true --trusted-ca-file=<server dir>/server-ca.crt
//	--cert-file=<server dir>/server.crt --key-file=<server dir>/server.key
//
// before the token, the Secrets mounted as volumes member-peer-tls
// (/etc/etcdtls/member/peer-tls), member-server-tls
// (/etc/etcdtls/member/server-tls) and etcd-client-tls, the operator
// Secret (/etc/etcdtls/operator/etcd-tls): mounted after etcd-data, and
// listed before it (AddEtcdVolumeToPod appends etcd-data last); and
// probes that call https://localhost:2379 with the operator Secret's
// certificate.
func CoreOSTLSMemberPod(cluster, namespace, member, version string, initialCluster []string, state, token string, owner OwnerRef, claim string, tls CoreOSTLS) Object {
	return coreosMemberPod(cluster, namespace, member, version, initialCluster, state, token, owner, claim, &tls)
}

func coreosMemberPod(cluster, namespace, member, version string, initialCluster []string, state, token string, owner OwnerRef, claim string, tls *CoreOSTLS) Object {
	version = strings.TrimPrefix(version, "v")
	addr := CoreOSMemberAddr(namespace, member)
	scheme := "http"
	if tls != nil {
		scheme = "https"
	}
	command := fmt.Sprintf("/usr/local/bin/etcd --data-dir=%s --name=%s --initial-advertise-peer-urls=%s "+
		"--listen-peer-urls=%s --listen-client-urls=%s --advertise-client-urls=%s "+
		"--initial-cluster=%s --initial-cluster-state=%s",
		"/var/etcd/data", member, scheme+"://"+addr+":2380", scheme+"://0.0.0.0:2380", scheme+"://0.0.0.0:2379", scheme+"://"+addr+":2379",
		strings.Join(initialCluster, ","), state)
	if tls != nil {
		command += fmt.Sprintf(" --peer-client-cert-auth=true --peer-trusted-ca-file=%[1]s/peer-ca.crt --peer-cert-file=%[1]s/peer.crt --peer-key-file=%[1]s/peer.key", coreosPeerTLSDir)
		command += fmt.Sprintf(" --client-cert-auth=true --trusted-ca-file=%[1]s/server-ca.crt --cert-file=%[1]s/server.crt --key-file=%[1]s/server.key", coreosServerTLSDir)
	}
	if state == "new" {
		command = fmt.Sprintf("%s --initial-cluster-token=%s", command, token)
	}
	readiness := coreosProbe(tls != nil)
	readiness.InitialDelaySeconds, readiness.TimeoutSeconds, readiness.PeriodSeconds, readiness.FailureThreshold = 1, 5, 5, 3
	vol := corev1.Volume{Name: "etcd-data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	if claim != "" {
		vol.VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
	}
	var volumes []corev1.Volume
	mounts := []corev1.VolumeMount{{Name: "etcd-data", MountPath: "/var/etcd"}}
	if tls != nil {
		secret := func(name, secretName string) corev1.Volume {
			return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secretName}}}
		}
		mounts = append(mounts,
			corev1.VolumeMount{MountPath: coreosPeerTLSDir, Name: coreosPeerTLSVolume},
			corev1.VolumeMount{MountPath: coreosServerTLSDir, Name: coreosServerTLSVolume},
			corev1.VolumeMount{MountPath: coreosOperatorTLSDir, Name: coreosOperatorVolume})
		volumes = append(volumes,
			secret(coreosPeerTLSVolume, tls.PeerSecret),
			secret(coreosServerTLSVolume, tls.ServerSecret),
			secret(coreosOperatorVolume, tls.OperatorSecret))
	}
	volumes = append(volumes, vol)
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: member, Namespace: namespace,
			Labels:          map[string]string{"app": "etcd", "etcd_node": member, "etcd_cluster": cluster},
			Annotations:     map[string]string{CoreOSVersionAnnotation: version},
			OwnerReferences: []metav1.OwnerReference{owner.meta()},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{
				Image:   CoreOSBusyboxImage,
				Name:    "check-dns",
				Command: []string{"/bin/sh", "-c", coreosCheckDNSScript(0, addr)},
			}},
			Containers: []corev1.Container{{
				Command: strings.Split(command, " "),
				Name:    "etcd",
				Image:   CoreOSRepository + ":v" + version,
				Ports: []corev1.ContainerPort{
					{Name: "server", ContainerPort: 2380, Protocol: corev1.ProtocolTCP},
					{Name: "client", ContainerPort: 2379, Protocol: corev1.ProtocolTCP},
				},
				VolumeMounts:   mounts,
				LivenessProbe:  coreosProbe(tls != nil),
				ReadinessProbe: readiness,
			}},
			RestartPolicy:                corev1.RestartPolicyNever,
			Volumes:                      volumes,
			Hostname:                     member,
			Subdomain:                    cluster,
			AutomountServiceAccountToken: new(false),
		},
	}
	return coreosObject(pod)
}

// CoreOSMemberClaim renders a member's claim as NewEtcdPodPVC did: named
// after the member, labelled app: etcd and etcd_cluster: <cluster>, with
// the cluster's spec.pod.persistentVolumeClaimSpec as its spec.
func CoreOSMemberClaim(cluster, namespace, member string, spec map[string]any, owner OwnerRef) Object {
	obj := coreosObject(corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name: member, Namespace: namespace, Labels: coreosLabels(cluster),
			OwnerReferences: []metav1.OwnerReference{owner.meta()},
		},
	})
	obj["spec"] = deepCopyJSON(map[string]any(spec))
	return obj
}

// CoreOSServices renders the operator's two Services, in the order it
// created them (setupServices): <cluster>-client, a ClusterIP Service with
// port client 2379, then <cluster>, headless (clusterIP None), with ports
// client 2379 and peer 2380. Both are labelled and select app: etcd,
// etcd_cluster: <cluster>, carry the annotation
// service.alpha.kubernetes.io/tolerate-unready-endpoints: "true" (both of
// them: newEtcdServiceManifest sets it for every Service) and the owner
// reference.
func CoreOSServices(cluster, namespace string, owner OwnerRef) []Object {
	port := func(name string, p int) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: int32(p), TargetPort: intstr.FromInt32(int32(p)), Protocol: corev1.ProtocolTCP}
	}
	svc := func(name, clusterIP string, ports ...corev1.ServicePort) Object {
		return coreosObject(corev1.Service{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: namespace, Labels: coreosLabels(cluster),
				Annotations:     map[string]string{CoreOSTolerateUnreadyAnnotation: "true"},
				OwnerReferences: []metav1.OwnerReference{owner.meta()},
			},
			Spec: corev1.ServiceSpec{Ports: ports, Selector: coreosLabels(cluster), ClusterIP: clusterIP},
		})
	}
	return []Object{
		svc(cluster+"-client", "", port("client", 2379)),
		svc(cluster, corev1.ClusterIPNone, port("client", 2379), port("peer", 2380)),
	}
}

// coreosObject turns a typed object into an Object as it would be sent:
// without the status and null creationTimestamp encoding/json writes for
// the zero values.
func coreosObject(v any) Object {
	var obj Object
	if err := json.Unmarshal(mustJSON(v), &obj); err != nil {
		panic(fmt.Sprintf("coreos object: %v", err))
	}
	delete(ensureMap(obj, "metadata"), "creationTimestamp")
	delete(obj, "status")
	return obj
}
