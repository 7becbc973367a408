package etcdbackup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// A continuous backup (spec.backupPolicy.deltaIntervalInSecond) is one
// long-running Pod, the archiver: this project's image in its archive
// mode, which stores every change of the cluster within the interval and
// full snapshots to replay them on (agent/archiver.go). It never exits on
// its own, so it cannot report through a termination message; it serves
// its status on report.ArchiveStatusPort, and the hook reads it on each
// sync (ArchiveObservation) with a short timeout.
//
// The archiver's name carries a hash of what it runs: a spec change is a
// new Pod, and the old one stays until the new one is ready, so that no
// interval goes unarchived. Two archivers at once are harmless: the store
// keeps the first object of a revision range, and a restore picks one
// delta per range (agent/archive, docs/continuous-backup.md).
const (
	// LabelRole marks an EtcdBackup's Pods by what they do: RoleArchiver
	// for the archiver; run Pods carry none.
	LabelRole    = v1beta2.Group + "/backup-role"
	RoleArchiver = "archiver"

	// ArchiverContainer is the archiver's container.
	ArchiverContainer = "archive"

	keyDir      = "/etc/etcd-backup/key"
	keyVolume   = "encryption-key"
	spoolDir    = "/var/spool/etcd-archive"
	spoolVolume = "spool"

	// ReasonArchiving and the others are BackupReady's reasons.
	ReasonArchiving       = "Archiving"
	ReasonArchiverStart   = "ArchiverStarting"
	ReasonArchiverSilent  = "ArchiverNotReporting"
	ReasonDeltasBehind    = "DeltasBehind"
	ReasonKeyInvalid      = "EncryptionKeyInvalid"
	ReasonSnapshotPending = "FirstSnapshotPending"

	// statusRefresh is how often the archiver's figures (the newest delta,
	// the RPO) are written to the status while nothing else in it
	// changes: each write of the status is an event that syncs the
	// EtcdBackup again, so every delta would otherwise be a sync loop.
	statusRefresh = 30 * time.Second
	// resyncArchiving is how often a continuous backup's sync reads the
	// archiver: it bounds how late BackupReady turns False.
	resyncArchiving = 10 * time.Second
)

// ConditionBackupReady: every change a continuous backup is to keep is
// stored, or will be within 3 delta intervals.
const ConditionBackupReady v1beta2.ConditionType = "BackupReady"

// ArchiveObservation is what the hook read from one archiver Pod.
type ArchiveObservation struct {
	// Status is the archiver's answer; nil when it gave none.
	Status *report.ArchiveStatus
	// Error says why there is no answer.
	Error string
}

// IsArchiver says whether a child Pod is an archiver, whose status the
// hook reads before planning.
func IsArchiver(pod *corev1.Pod) bool { return pod.Labels[LabelRole] == RoleArchiver }

// planContinuous runs the archiver, and reports what it says.
func (p *planner) planContinuous() {
	p.resync = resyncArchiving
	if len(p.o.SpecErrors) > 0 {
		p.block(ReasonInvalidSpec, "the spec is invalid, so no backup is taken: "+p.o.SpecErrors.ToAggregate().Error())
		p.ready = cond{metav1.ConditionFalse, ReasonInvalidSpec, p.progressing.message}
		return
	}
	t, reason, msg := p.checkRun()
	if reason == "" {
		reason, msg = p.checkEncryptionKey()
	}
	if reason != "" {
		// The archivers running keep running, with what they mounted when
		// they started: a Secret deleted by mistake must not end a
		// continuous backup. The condition says what is wrong.
		for _, pod := range p.archivers {
			p.children = append(p.children, plan.KeepPod(pod))
		}
		p.block(reason, msg)
		p.ready = cond{metav1.ConditionFalse, reason, msg}
		p.reportArchive(p.newestArchiver())
		return
	}
	want := p.archiverPod(t)
	p.children = append(p.children, plan.Child{Kind: plan.KindPod, Name: want.Name, Object: want})
	current := p.archivers[want.Name]
	for name, pod := range p.archivers {
		// An archiver of an earlier spec runs on until this one is ready.
		if name != want.Name && (current == nil || !podReady(current)) && pod.DeletionTimestamp == nil {
			p.children = append(p.children, plan.KeepPod(pod))
		}
	}
	p.progressing = cond{metav1.ConditionFalse, ReasonArchiving, "archiver " + want.Name + " stores every change within " + p.deltaInterval().String()}
	p.reportArchive(p.reporting(current))
}

// reporting is the archiver whose answer the status reports: the current
// one once it answers; until then an earlier one that still archives.
func (p *planner) reporting(current *corev1.Pod) *corev1.Pod {
	if current == nil || p.o.Archive[current.Name].Status != nil {
		return current
	}
	for name, pod := range p.archivers {
		if st := p.o.Archive[name].Status; name != current.Name && st != nil && st.Chained() {
			return pod
		}
	}
	return current
}

func (p *planner) deltaInterval() time.Duration {
	return time.Duration(p.policy().DeltaIntervalInSecond) * time.Second
}

// newestArchiver is the archiver created last, or nil.
func (p *planner) newestArchiver() *corev1.Pod {
	var newest *corev1.Pod
	for _, pod := range p.archivers {
		if newest == nil || pod.CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = pod
		}
	}
	return newest
}

// checkEncryptionKey looks at the key before an archiver mounts it: a
// missing Secret would hold the Pod in ContainerCreating, and a key of the
// wrong length would make it fail where the hook sees only restarts.
func (p *planner) checkEncryptionKey() (reason, msg string) {
	k := p.o.Backup.Spec.Encryption
	if k == nil {
		return "", ""
	}
	s, ok := p.o.Secrets[k.SecretName]
	if !ok {
		return ReasonSecretInvalid, fmt.Sprintf("Secret %q (spec.encryption.secretName) not found in namespace %s", k.SecretName, p.o.Backup.Namespace)
	}
	data, ok := s.Data[k.Key]
	if !ok {
		if text, ok2 := s.StringData[k.Key]; ok2 {
			data, ok = []byte(text), true
		}
	}
	if !ok {
		return ReasonKeyInvalid, fmt.Sprintf("Secret %q (spec.encryption.secretName) has no key %q (spec.encryption.key)", k.SecretName, k.Key)
	}
	if _, err := v1beta2.ParseEncryptionKey(data); err != nil {
		return ReasonKeyInvalid, fmt.Sprintf("Secret %q key %q (spec.encryption) is not an encryption key: %v", k.SecretName, k.Key, err)
	}
	return "", ""
}

// archiverPod renders the archiver for the spec: the run Pod's
// destination and client certificate, the key's Secret, and a spool
// volume for snapshots on their way to the store.
func (p *planner) archiverPod(t runTarget) *corev1.Pod {
	b, pol := p.o.Backup, p.policy()
	args := []string{
		"archive",
		"--endpoints=" + strings.Join(t.endpoints, ","),
		"--delta-interval=" + p.deltaInterval().String(),
		"--snapshot-interval=" + (time.Duration(pol.BackupIntervalInSecond) * time.Second).String(),
		fmt.Sprintf("--max-snapshots=%d", pol.MaxBackups),
		"--spool-dir=" + spoolDir,
		// On the Pod's own address, which is where the hook reads it.
		fmt.Sprintf("--status-addr=$(POD_IP):%d", report.ArchiveStatusPort),
	}
	if pol.CompressSnapshots {
		args = append(args, "--compress-snapshots")
	}
	destArgs, volume, mount := p.destination()
	args = append(args, destArgs...)
	volumes := []corev1.Volume{volume, {Name: spoolVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	mounts := []corev1.VolumeMount{mount, {Name: spoolVolume, MountPath: spoolDir}}
	if k := b.Spec.Encryption; k != nil {
		args = append(args, "--key-file="+keyDir+"/"+k.Key)
		volumes = append(volumes, corev1.Volume{Name: keyVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: k.SecretName, Items: []corev1.KeyToPath{{Key: k.Key, Path: k.Key}},
		}}})
		mounts = append(mounts, corev1.VolumeMount{Name: keyVolume, MountPath: keyDir, ReadOnly: true})
	}
	no, yes := false, true
	uid := int64(nonrootUID)
	probe := &corev1.Probe{
		// Ready once it has found its chain and watches: an archiver of
		// an earlier spec is deleted only then.
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: report.ArchiveReadyPath, Port: intstr.FromInt32(report.ArchiveStatusPort)}},
		PeriodSeconds: 5,
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: b.Namespace,
			Labels:    map[string]string{"app": "etcd-backup", LabelBackup: b.Name, LabelRole: RoleArchiver},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyAlways,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: ptr(int64(30)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:    ArchiverContainer,
				Image:   p.o.AgentImage,
				Command: []string{agentPath},
				Args:    args,
				Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"},
				}}},
				Ports:        []corev1.ContainerPort{{Name: "status", ContainerPort: report.ArchiveStatusPort, Protocol: corev1.ProtocolTCP}},
				VolumeMounts: mounts,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("96Mi")},
					// 52 MiB at 5,000 puts/s (BENCHMARKS.md); snapshots are
					// spooled to disk, not held.
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				ReadinessProbe:           probe,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Volumes: volumes,
		},
	}
	addClientTLS(pod, t.tls)
	pod.Name = archiverName(b.Name, pod.Spec)
	return pod
}

// archiverName is "<backup>-pitr-<hash of the Pod spec>": 13 characters
// beyond the name, which MaxBackupNameLength leaves room for.
func archiverName(backup string, spec corev1.PodSpec) string {
	data, _ := json.Marshal(spec)
	sum := sha256.Sum256(data)
	return backup + "-pitr-" + hex.EncodeToString(sum[:])[:7]
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// splitArchivers takes the archivers out of the observed Pods, which are
// then the runs alone.
func splitArchivers(pods map[string]*corev1.Pod) (runs, archivers map[string]*corev1.Pod) {
	for name, pod := range pods {
		if IsArchiver(pod) {
			if archivers == nil {
				archivers = map[string]*corev1.Pod{}
				runs = make(map[string]*corev1.Pod, len(pods))
				for n, p := range pods {
					if !IsArchiver(p) {
						runs[n] = p
					}
				}
			}
			archivers[name] = pod
		}
	}
	if archivers == nil {
		return pods, nil
	}
	return runs, archivers
}
