package etcdcluster

import (
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

const (
	// Labels carried by every member Pod, as in the CoreOS operator, so
	// that its Services' selectors and users' queries keep working.
	LabelApp     = "app"
	LabelCluster = "etcd_cluster"
	LabelNode    = "etcd_node"
	// AnnotationVersion is the CoreOS operator's reserved annotation.
	AnnotationVersion = "etcd.version"
	// LabelServing marks the member Pods that take client traffic: the
	// client Service selects it. See serving.go.
	LabelServing = v1beta2.LabelServing

	dataVolume = "etcd-data"
	dataMount  = "/var/etcd"
	dataDir    = dataMount + "/data"
	etcdBinary = "/usr/local/bin/etcd"
)

// memberPodInput is what a member Pod is rendered from.
type memberPodInput struct {
	cluster *v1beta2.EtcdCluster
	spec    v1beta2.ClusterSpec // defaulted
	name    string
	// initialCluster and state matter only to a member that starts on an
	// empty data dir; etcd ignores them once it has data.
	initialCluster string
	state          string
	// seed and token name the etcd cluster the member belongs to.
	seed, token string
	// trust is AnnotationTrustedCA, with spec.TLS.auto.
	trust string
	// tls are the Secrets the member mounts (see mountedSecrets).
	tls v1beta2.TLSSecretNames
	// serving: the member may take client traffic from its first start
	// (see serving.go).
	serving bool
}

// memberPod renders a member's Pod for the cluster this sync runs.
func (p *planner) memberPod(name, initialCluster, state string) *corev1.Pod {
	in := memberPodInput{
		cluster: p.o.Cluster, spec: p.spec, name: name, initialCluster: initialCluster, state: state,
		seed: p.seed(), token: p.clusterToken(), serving: p.serving[name], trust: p.trustMarker(),
		tls: p.mountedSecrets(),
	}
	pod := renderMemberPod(in)
	// A member a restore started restores again whenever it is rendered
	// anew: its steps change nothing on a data dir with a member, and a
	// member that never ran must not start empty.
	if rec := p.rec; restoredMember(rec, name) {
		members := rec.Restore.Members
		if len(members) == 0 {
			members = []string{rec.SeedMember}
		}
		in.initialCluster, in.state = p.restoreInitialCluster(members), "new"
		pod = renderMemberPod(in)
		p.addRestoreSteps(pod, in, rec.Restore.Source, rec.Restore.Request, rec.Restore.ReplacedRevision)
	}
	return pod
}

// memberLabels are a member Pod's labels; serving adds LabelServing,
// which nothing but the hook sets (validation refuses it in spec.pod).
func memberLabels(cluster, member string, policy *v1beta2.PodPolicy, serving bool) map[string]string {
	labels := map[string]string{}
	if policy != nil {
		maps.Copy(labels, policy.Labels)
	}
	delete(labels, LabelServing)
	labels[LabelApp] = "etcd"
	labels[LabelCluster] = cluster
	labels[LabelNode] = member
	if serving {
		labels[LabelServing] = "true"
	}
	return labels
}

func selectorLabels(cluster string) map[string]string {
	return map[string]string{LabelApp: "etcd", LabelCluster: cluster}
}

func renderMemberPod(in memberPodInput) *corev1.Pod {
	c, spec, policy := in.cluster, in.spec, in.spec.Pod
	annotations := map[string]string{}
	if policy != nil {
		maps.Copy(annotations, policy.Annotations)
	}
	annotations[AnnotationVersion] = spec.Version
	annotations[AnnotationSeedMember] = in.seed
	annotations[AnnotationPodSpecHash] = withRollout(podSpecHash(spec), c.Annotations[AnnotationRollout])
	if in.trust != "" {
		annotations[AnnotationTrustedCA] = in.trust
	}

	container := corev1.Container{
		Name:    "etcd",
		Image:   spec.Image(),
		Command: etcdCommand(in),
		Ports: []corev1.ContainerPort{
			{Name: "client", ContainerPort: plan.ClientPort, Protocol: corev1.ProtocolTCP},
			{Name: "peer", ContainerPort: plan.PeerPort, Protocol: corev1.ProtocolTCP},
		},
		VolumeMounts:   []corev1.VolumeMount{{Name: dataVolume, MountPath: dataMount}},
		ReadinessProbe: readinessProbe(spec),
	}
	if servesMetrics(spec.Version) {
		container.Ports = append(container.Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP})
	}
	if policy != nil {
		container.Resources = policy.Resources
		container.Env = policy.EtcdEnv
	}

	enableServiceLinks := false
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        in.name,
			Namespace:   c.Namespace,
			Labels:      memberLabels(c.Name, in.name, policy, in.serving),
			Annotations: annotations,
		},
		Spec: corev1.PodSpec{
			Hostname:  in.name,
			Subdomain: c.Name,
			// Always, so that an etcd exit or a node reboot restarts the
			// member on its data instead of turning it into a dead member.
			RestartPolicy: corev1.RestartPolicyAlways,
			// Service links would put variables such as ETCD_PORT into the
			// environment when a Service named "etcd" exists, and etcd
			// reads every ETCD_* variable as a flag.
			EnableServiceLinks: &enableServiceLinks,
			Containers:         []corev1.Container{container},
			Volumes:            []corev1.Volume{dataVolumeFor(in.name, spec)},
			Affinity:           affinityFor(c.Name, policy),
		},
	}
	addTLS(pod, in.tls)
	if policy != nil {
		pod.Spec.NodeSelector = policy.NodeSelector
		pod.Spec.Tolerations = policy.Tolerations
		pod.Spec.SecurityContext = policy.SecurityContext
		pod.Spec.PriorityClassName = policy.PriorityClassName
		pod.Spec.ImagePullSecrets = policy.ImagePullSecrets
		pod.Spec.TopologySpreadConstraints = policy.TopologySpreadConstraints
	}
	if policy.DefaultPlacement() {
		pod.Spec.TopologySpreadConstraints = defaultSpread(c.Name, policy.SpreadOrDefault())
	}
	return pod
}

// defaultSpread spreads members over zones, then nodes, one member apart at
// most. Preferred by default, so that a cluster on one zone, or on fewer
// nodes than members, still schedules; strict on request. A Pod rendered
// before a hook release that added this keeps its placement until the
// next rollout (the pod-spec hash is of the spec, not of the rendering).
func defaultSpread(cluster string, spread v1beta2.SpreadPolicy) []corev1.TopologySpreadConstraint {
	when := corev1.ScheduleAnyway
	if spread == v1beta2.SpreadStrict {
		when = corev1.DoNotSchedule
	}
	out := make([]corev1.TopologySpreadConstraint, 0, 2)
	for _, key := range []string{v1beta2.LabelTopologyZone, v1beta2.LabelHostname} {
		out = append(out, corev1.TopologySpreadConstraint{
			MaxSkew:           1,
			TopologyKey:       key,
			WhenUnsatisfiable: when,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: selectorLabels(cluster)},
		})
	}
	return out
}

func etcdCommand(in memberPodInput) []string {
	c := *in.cluster
	c.Spec = in.spec
	addr := plan.AddressesOf(&c)
	cmd := []string{
		etcdBinary,
		"--name=" + in.name,
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + addr.ListenClientURL(),
		"--listen-peer-urls=" + addr.ListenPeerURL(),
		"--advertise-client-urls=" + addr.ClientURL(in.name),
		"--initial-advertise-peer-urls=" + addr.PeerURL(in.name),
		"--initial-cluster=" + in.initialCluster,
		"--initial-cluster-state=" + in.state,
		"--initial-cluster-token=" + in.token,
	}
	if servesMetrics(in.spec.Version) {
		cmd = append(cmd, fmt.Sprintf("--listen-metrics-urls=http://0.0.0.0:%d", MetricsPort))
	}
	return append(cmd, etcdSettingsFlags(in.spec)...)
}

// MetricsPort serves /metrics and /health over plain HTTP, with no client
// certificate: the kubelet's probes and Prometheus have none.
const MetricsPort = 2381

// servesMetrics: --listen-metrics-urls arrived in etcd 3.3.
func servesMetrics(version string) bool {
	v, ok := parseVersion(version)
	return ok && !v.less(semver{3, 3, 0})
}

// readinessProbe asks etcd whether it can serve, on the metrics port:
// there it answers without a client certificate, which a member that
// serves clients TLS asks of every caller on its client port. From 3.5 on
// the probe reads serializably: a learner, or a member cut off from the
// leader for a moment, still has its data, and a linearizable check would
// flap it. From 3.4 on it leaves the NOSPACE alarm out: that alarm is
// raised on every member at once, and a member that refuses writes still
// serves reads; counted, it would take every member out of the client
// Service together, and hold the housekeeping that recovers from it (which
// waits for every member to be ready). A release without a metrics port is
// probed on its client port, by TCP when that asks for a certificate.
func readinessProbe(spec v1beta2.ClusterSpec) *corev1.Probe {
	path := "/health"
	switch v, ok := parseVersion(spec.Version); {
	case ok && !v.less(semver{3, 5, 0}):
		path = "/health?serializable=true&exclude=NOSPACE"
	case ok && !v.less(semver{3, 4, 0}):
		path = "/health?exclude=NOSPACE"
	}
	handler := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path:   path,
		Port:   intstr.FromInt32(MetricsPort),
		Scheme: corev1.URISchemeHTTP,
	}}
	switch {
	case servesMetrics(spec.Version):
	case spec.TLS.IsSecureClient():
		handler = corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(plan.ClientPort)}}
	default:
		handler.HTTPGet.Port = intstr.FromInt32(plan.ClientPort)
	}
	return &corev1.Probe{
		ProbeHandler:     handler,
		PeriodSeconds:    2,
		TimeoutSeconds:   2,
		FailureThreshold: 3,
		SuccessThreshold: 1,
	}
}

// MemberClientURL is where a member Pod serves clients, as it was
// rendered: the scheme its Pod says, not the one the spec says now (they
// differ only while a TLS change is refused, and the hook still reports
// on such a cluster).
func MemberClientURL(c *v1beta2.EtcdCluster, pod *corev1.Pod) string {
	for _, ctr := range pod.Spec.Containers {
		if ctr.Name != "etcd" {
			continue
		}
		for _, arg := range ctr.Command {
			if u, ok := strings.CutPrefix(arg, "--advertise-client-urls="); ok && u != "" {
				first, _, _ := strings.Cut(u, ",")
				return first
			}
		}
	}
	return plan.AddressesOf(c).ClientURL(pod.Name)
}

func dataVolumeFor(member string, spec v1beta2.ClusterSpec) corev1.Volume {
	if spec.Persistent() {
		return corev1.Volume{Name: dataVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: member},
		}}
	}
	return corev1.Volume{Name: dataVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

// affinityFor spreads members over nodes by default, preferred rather than
// required so that a cluster still forms on a single-node test cluster.
func affinityFor(cluster string, policy *v1beta2.PodPolicy) *corev1.Affinity {
	if policy != nil && policy.Affinity != nil {
		return policy.Affinity
	}
	term := corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: selectorLabels(cluster)},
		TopologyKey:   "kubernetes.io/hostname",
	}
	if policy != nil && policy.AntiAffinity {
		return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term},
		}}
	}
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: term}},
	}}
}

func podReady(p *corev1.Pod) bool {
	if p == nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyOn reports a Pod ready on the given image. After an image change
// the Pod's Ready condition still speaks for the old container until the
// kubelet next reports, and so may what Metacontroller sends; only the
// container's own status says which image its readiness is for.
func readyOn(p *corev1.Pod, image string) bool {
	if !podReady(p) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "etcd" {
			return c.Ready && sameImage(c.Image, image)
		}
	}
	return false
}

// sameImage compares image references as a container runtime reports them:
// a name without a registry is on docker.io, and one without a namespace
// there is in library/.
func sameImage(a, b string) bool { return normalizeImage(a) == normalizeImage(b) }

func normalizeImage(ref string) string {
	first, rest, found := strings.Cut(ref, "/")
	switch {
	case !found:
		return "docker.io/library/" + ref
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + ref
	case first == "index.docker.io":
		return "docker.io/" + rest
	}
	return ref
}

// podFinished reports a Pod that will never run its container again:
// with restartPolicy Always that only happens when the Pod is evicted or
// its node is lost.
func podFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}
