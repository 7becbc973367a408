package etcdbackup

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

const (
	// ContainerName is the agent's container in a run Pod.
	ContainerName = "backup"
	// LabelBackup and LabelGeneration mark a run Pod: its EtcdBackup, and
	// the spec's generation it runs for.
	LabelBackup     = v1beta2.Group + "/backup"
	LabelGeneration = v1beta2.Group + "/backup-generation"

	awsDir     = "/etc/etcd-backup/aws"
	awsVolume  = "aws"
	volumeDir  = "/var/etcd-backup"
	dataVolume = "backups"
	agentPath  = "/etcd-hook"
	nonrootUID = 65532
)

// runPod renders one run: the agent with the S3 Secret (or the claim)
// and the client certificate's Secret mounted, no Kubernetes credentials,
// nothing written but its result.
//
// A final backup (request) is named as a periodic one and prunes nothing.
func (p *planner) runPod(name string, t runTarget, request string) *corev1.Pod {
	b := p.o.Backup
	args := []string{
		"backup",
		"--endpoints=" + strings.Join(t.endpoints, ","),
		fmt.Sprintf("--timeout=%s", p.timeout()),
		// Where the kubelet reads the termination message, named rather
		// than left to the agent's default, so that it is visibly the same.
		"--result-file=" + corev1.TerminationMessagePathDefault,
	}
	destArgs, volume, mount := p.destination()
	args = append(args, destArgs...)
	switch pol := p.policy(); {
	case request != "":
		args = append(args, "--periodic", "--max-backups=0")
	case pol.BackupIntervalInSecond > 0:
		args = append(args, "--periodic", fmt.Sprintf("--max-backups=%d", pol.MaxBackups))
	}
	no, yes := false, true
	uid := int64(nonrootUID)
	// The kubelet ends a run that outlives its timeout by much; the agent
	// itself gives up at the timeout and aborts its upload.
	deadline := int64((p.timeout() + startGrace).Seconds())
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: b.Namespace,
			Labels: map[string]string{"app": "etcd-backup", LabelBackup: b.Name, LabelGeneration: strconv.FormatInt(b.Generation, 10)},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: ptr(int64(30)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:         ContainerName,
				Image:        p.o.AgentImage,
				Command:      []string{agentPath},
				Args:         args,
				VolumeMounts: []corev1.VolumeMount{mount},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("96Mi")},
					// Two 8 MiB parts and the clients: about 70 MiB whatever
					// the database's size (BENCHMARKS.md).
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Volumes: []corev1.Volume{volume},
		},
	}
	if request != "" {
		pod.Annotations = map[string]string{AnnotationRequest: request}
	}
	addClientTLS(pod, t.tls)
	return pod
}

// destination is where runs and the archiver write: the agent's flags,
// and the S3 Secret or the claim to mount.
func (p *planner) destination() (args []string, volume corev1.Volume, mount corev1.VolumeMount) {
	b := p.o.Backup
	if pvc := b.Spec.PVC; b.Spec.StorageType == v1beta2.BackupStoragePVC {
		file := pvc.Path
		if file == "" {
			file = "etcd.backup"
		}
		args = append(args, "--dir="+volumeDir, "--file="+file, "--volume="+pvc.ClaimName)
		volume = corev1.Volume{Name: dataVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.ClaimName},
		}}
		mount = corev1.VolumeMount{Name: dataVolume, MountPath: volumeDir}
	} else {
		s3 := b.Spec.S3
		args = append(args, "--s3-path="+s3.Path, "--aws-dir="+awsDir)
		if s3.Endpoint != "" {
			args = append(args, "--s3-endpoint="+s3.Endpoint)
		}
		if s3.ForcePathStyle {
			args = append(args, "--s3-force-path-style")
		}
		volume = corev1.Volume{Name: awsVolume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: s3.AWSSecret},
		}}
		mount = corev1.VolumeMount{Name: awsVolume, MountPath: awsDir, ReadOnly: true}
	}
	return args, volume, mount
}

func ptr[T any](v T) *T { return &v }
