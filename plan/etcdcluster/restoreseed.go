package etcdcluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// The seed of a restored cluster restores its data dir before etcd first
// starts, in two init containers:
//   - restore-fetch runs this project's image with the storage credentials:
//     it fetches the snapshot onto the data volume, checks its sha256 and
//     etcd's own trailer, refuses one from a newer etcd minor, and copies
//     its own static binary into a scratch volume for the next step;
//   - restore runs the etcd image of the cluster's version, so that the
//     data dir is written by that release's own tool (etcdutl, or etcdctl
//     below 3.5). The image has no shell: our binary, copied over, runs the
//     tool and moves the result into place.
//
// Both do nothing on a data dir that already holds a member, so a Pod that
// starts again, or a member recreated on its claim, keeps its data.
const (
	restoreFetchContainer = "restore-fetch"
	restoreApplyContainer = "restore"

	restoreToolsVolume  = "restore-tools"
	restoreToolsDir     = "/restore-tools"
	restoreAWSVolume    = "restore-aws"
	restoreAWSDir       = "/etc/etcd-restore/aws"
	restoreSourceVolume = "restore-source"
	restoreKeyVolume    = "restore-key"
	restoreKeyDir       = "/etc/etcd-restore/key"
	restoreSourceDir    = "/restore-source"
	restoreSnapshot     = dataMount + "/restore/snapshot.db"
	agentBinary         = "/etcd-hook"

	// BumpRevision lifts the restored store above every revision the
	// history it replaces handed out, so that a client that saw one (a
	// watcher such as kube-apiserver) never sees revisions go backwards or
	// gets events of another history under a revision it knows; the gap is
	// marked compacted, so such a watcher is told to re-list instead of
	// waiting for revisions that will never come.
	//
	// It is counted from the snapshot's revision or from the highest
	// revision the hook knows the replaced history reached (the members'
	// in this sync, or the bootstrap record's RevisionSeen), whichever is
	// the higher: a snapshot taken before an earlier restore is older than
	// that restore's whole history. The bump itself covers what the hook
	// cannot know: the writes after it last saw the members.
	BumpRevision = 1_000_000_000

	// AnnotationReplacedRevision on a restore's seed Pod is the replaced
	// revision its restore step was given. The Pod is rendered once; when
	// the restore is committed, the record keeps the value, so that the
	// seed rendered again restores exactly as the first one would have.
	AnnotationReplacedRevision = v1beta2.Group + "/replaced-revision"
)

// bumpsRevision says whether the restore for request lifts the revision:
// --bump-revision and --mark-compacted came with etcd 3.5.10.
//
// The final backup of a hibernation is restored as it is: it was taken
// behind the write fence, so it holds the last revision the history ever
// handed out, and a watcher resumes across the hibernation as across a
// restart, without a re-list.
func bumpsRevision(version, request string) bool {
	v, _ := parseVersion(strings.TrimPrefix(version, "v"))
	return !v.less(semver{3, 5, 10}) && !strings.HasPrefix(request, hibernationRestorePrefix)
}

// restoredRevision is the revision the store restored from a snapshot at
// snapshot starts at, given the replaced history's revision.
func restoredRevision(version, request string, snapshot, replaced int64) int64 {
	if !bumpsRevision(version, request) {
		return snapshot
	}
	return max(snapshot, replaced) + BumpRevision
}

// seedReplacedRevision is what a restore's seed Pod was rendered with.
func seedReplacedRevision(pod *corev1.Pod) int64 {
	if pod == nil {
		return 0
	}
	rev, err := strconv.ParseInt(pod.Annotations[AnnotationReplacedRevision], 10, 64)
	if err != nil || rev < 0 {
		return 0
	}
	return rev
}

// DefaultAgentImage is used when the hook was not told its own image.
const DefaultAgentImage = "ghcr.io/etcdhook/etcd-hook:latest"

// restoreSeedPod renders the seed of a cluster restored from src. Its
// initial cluster names every member the restore starts at once (see
// restoreMembers): the seed's etcd, once restored, waits for them, and
// the others are rendered when its fetch has verified the backup.
func (p *planner) restoreSeedPod(seed string, req *restoreRequest) *corev1.Pod {
	c := p.o.Cluster
	token := ClusterToken(c.Name, string(c.UID))
	if seed != p.firstSeedName() {
		token += "-" + seed
	}
	members := p.restoreMembers(seed, req.id, req.source)
	in := memberPodInput{
		cluster: c, spec: p.spec, name: seed,
		initialCluster: p.restoreInitialCluster(members),
		state:          "new", seed: seed, token: token, trust: p.trustMarker(),
		tls: p.mountedSecrets(),
	}
	pod := renderMemberPod(in)
	p.addRestoreSteps(pod, in, req.source, req.id, p.replacedRevision())
	pod.Annotations[AnnotationRestoreMembers] = strings.Join(members, ",")
	return pod
}

// chainPath is the key a restore's fetch reads: of a chain whose history
// the seed resolved, that history's directory, so that every member reads
// the one the seed verified; otherwise the source's own.
func chainPath(path string, c *v1beta2.ChainTarget) string {
	if c == nil || c.History == "" || strings.Contains(path, v1beta2.ChainDir) {
		return path
	}
	return path + v1beta2.ChainDir + c.History + "/"
}

// AnnotationRestoreMembers on a restore's seed Pod names every member the
// restore starts, the seed first. The Pod is rendered once, before the
// backup is verified; the record takes the names from it when the restore
// is committed, so a spec.size changed meanwhile changes nothing of a
// restore under way (the cluster scales afterwards, as any cluster).
const AnnotationRestoreMembers = v1beta2.Group + "/restore-members"

// restoreMembers names the members a restore starts: the seed and
// spec.size - 1 more, derived from the request so that every sync names
// the same ones. Every one of them restores the same verified state from
// the store, in parallel, with the same initial cluster: the restore
// costs about one download, one restore and one start, instead of a
// member at a time receiving the whole database from the leader.
//
// A backup on a claim is restored by the seed alone, the others joining
// it as learners: every member mounting the claim would need it attached
// to every node at once, which a ReadWriteOnce claim is not.
func (p *planner) restoreMembers(seed, id string, src v1beta2.ResolvedSource) []string {
	c := p.o.Cluster
	names := []string{seed}
	if src.PVC != nil {
		return names
	}
	for i := 1; i < p.spec.Size; i++ {
		names = append(names, SeedName(c.Name, string(c.UID)+"/restore/"+id+"/"+strconv.Itoa(i)))
	}
	return names
}

// restoreInitialCluster is --initial-cluster of a restore's members.
func (p *planner) restoreInitialCluster(members []string) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = m + "=" + p.addresses().PeerURL(m)
	}
	return strings.Join(parts, ",")
}

// seedRestoreMembers is what a restore's seed Pod was rendered with; nil
// for a seed rendered before restores started every member at once.
func seedRestoreMembers(pod *corev1.Pod) []string {
	if pod == nil || pod.Annotations[AnnotationRestoreMembers] == "" {
		return nil
	}
	return strings.Split(pod.Annotations[AnnotationRestoreMembers], ",")
}

// restoredMember says whether name is a member the recorded restore
// started (the seed included).
func restoredMember(rec *v1beta2.BootstrapStatus, name string) bool {
	return rec != nil && rec.Restore != nil && (name == rec.SeedMember || slices.Contains(rec.Restore.Members, name))
}

// addRestoreSteps adds the init containers and volumes that restore src.
func (p *planner) addRestoreSteps(pod *corev1.Pod, in memberPodInput, src v1beta2.ResolvedSource, request string, replaced int64) {
	version := strings.TrimPrefix(in.spec.Version, "v")
	peer := p.addresses().PeerURL(in.name)
	image := p.o.AgentImage
	if image == "" {
		image = DefaultAgentImage
	}
	dataMountSpec := corev1.VolumeMount{Name: dataVolume, MountPath: dataMount}
	toolsMount := corev1.VolumeMount{Name: restoreToolsVolume, MountPath: restoreToolsDir}

	fetchArgs := []string{"restore", "fetch"}
	fetchMounts := []corev1.VolumeMount{dataMountSpec, toolsMount}
	volumes := []corev1.Volume{{Name: restoreToolsVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	switch {
	case src.S3 != nil:
		fetchArgs = append(fetchArgs, "--s3-path="+chainPath(src.S3.Path, src.Chain), "--aws-dir="+restoreAWSDir)
		if src.S3.Endpoint != "" {
			fetchArgs = append(fetchArgs, "--s3-endpoint="+src.S3.Endpoint)
		}
		if src.S3.ForcePathStyle {
			fetchArgs = append(fetchArgs, "--s3-force-path-style")
		}
		// Optional, so that a missing Secret is reported by the fetch, in
		// the Pod's termination message the hook reads, instead of leaving
		// the Pod stuck before it starts, where the hook sees nothing.
		optional := true
		volumes = append(volumes, corev1.Volume{Name: restoreAWSVolume, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: src.S3.AWSSecret, Optional: &optional},
		}})
		fetchMounts = append(fetchMounts, corev1.VolumeMount{Name: restoreAWSVolume, MountPath: restoreAWSDir, ReadOnly: true})
	case src.PVC != nil:
		fetchArgs = append(fetchArgs, "--file="+restoreSourceDir+"/"+chainPath(src.PVC.FilePath(), src.Chain))
		volumes = append(volumes, corev1.Volume{Name: restoreSourceVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: src.PVC.ClaimName, ReadOnly: true},
		}})
		fetchMounts = append(fetchMounts, corev1.VolumeMount{Name: restoreSourceVolume, MountPath: restoreSourceDir, ReadOnly: true})
	}
	if src.SHA256 != "" {
		fetchArgs = append(fetchArgs, "--sha256="+src.SHA256)
	}
	if c := src.Chain; c != nil {
		fetchArgs = append(fetchArgs, "--chain")
		switch {
		case c.Resolved > 0:
			fetchArgs = append(fetchArgs, fmt.Sprintf("--revision=%d", c.Resolved))
		case c.Revision > 0:
			fetchArgs = append(fetchArgs, fmt.Sprintf("--revision=%d", c.Revision))
		case c.Time != nil:
			fetchArgs = append(fetchArgs, "--time="+c.Time.UTC().Format(time.RFC3339))
		}
		if k := c.Encryption; k != nil {
			// Optional, as the AWS Secret is: a missing key is the fetch's
			// to report, in the termination message the hook reads.
			optional := true
			volumes = append(volumes, corev1.Volume{Name: restoreKeyVolume, VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: k.SecretName, Optional: &optional, Items: []corev1.KeyToPath{{Key: k.Key, Path: k.Key}}},
			}})
			fetchMounts = append(fetchMounts, corev1.VolumeMount{Name: restoreKeyVolume, MountPath: restoreKeyDir, ReadOnly: true})
			fetchArgs = append(fetchArgs, "--key-file="+restoreKeyDir+"/"+k.Key)
		}
	}
	fetchArgs = append(fetchArgs,
		"--etcd-version="+version,
		"--data-dir="+dataDir,
		"--snapshot="+restoreSnapshot,
		"--tools-dir="+restoreToolsDir,
		"--result-file="+corev1.TerminationMessagePathDefault,
	)

	apply := []string{restoreToolsDir + "/etcd-hook", "restore", "apply"}
	v, _ := parseVersion(version)
	if v.less(semver{3, 5, 0}) {
		apply = append(apply, "--etcdctl=/usr/local/bin/etcdctl")
	} else {
		apply = append(apply, "--etcdutl=/usr/local/bin/etcdutl")
	}
	apply = append(apply,
		"--snapshot="+restoreSnapshot,
		"--data-dir="+dataDir,
		"--name="+in.name,
		"--initial-cluster="+in.initialCluster,
		"--initial-cluster-token="+in.token,
		"--initial-advertise-peer-urls="+peer,
	)
	if bumpsRevision(version, request) {
		apply = append(apply, fmt.Sprintf("--bump-revision=%d", BumpRevision), "--mark-compacted")
		// Left out when 0, so that seeds rendered before the flag existed
		// render the same.
		if replaced > 0 {
			apply = append(apply, fmt.Sprintf("--replaced-revision=%d", replaced))
		}
	}
	apply = append(apply, "--result-file="+corev1.TerminationMessagePathDefault)

	// The fetch writes into the member's data volume, which belongs to the
	// user etcd runs as: root in etcd's images, unless the Pod policy sets a
	// user, which then applies to every container. Our image's own user
	// (nonroot) could not write to a claim owned by root.
	var fetchSecurity *corev1.SecurityContext
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsUser == nil {
		root := int64(0)
		fetchSecurity = &corev1.SecurityContext{RunAsUser: &root}
	}
	pod.Spec.InitContainers = []corev1.Container{
		{
			Name:                     restoreFetchContainer,
			SecurityContext:          fetchSecurity,
			Image:                    image,
			Command:                  []string{agentBinary},
			Args:                     fetchArgs,
			VolumeMounts:             fetchMounts,
			TerminationMessagePath:   corev1.TerminationMessagePathDefault,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		},
		{
			Name:                     restoreApplyContainer,
			Image:                    in.spec.Image(),
			Command:                  apply,
			VolumeMounts:             []corev1.VolumeMount{dataMountSpec, toolsMount},
			TerminationMessagePath:   corev1.TerminationMessagePathDefault,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		},
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, volumes...)
	pod.Annotations[AnnotationRestoreRequest] = request
	if replaced > 0 && bumpsRevision(version, request) {
		pod.Annotations[AnnotationReplacedRevision] = strconv.FormatInt(replaced, 10)
	}
}

type fetchState struct {
	verified bool
	// failed is set when the backup cannot be used: retrying cannot help.
	failed bool
	// trouble is the latest failure that is retried.
	trouble string
	result  report.RestoreResult
	at      *metav1.Time
}

func observeFetch(pod *corev1.Pod) fetchState {
	var st fetchState
	if pod == nil {
		return st
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		switch cs.Name {
		case restoreFetchContainer:
			for _, t := range []*corev1.ContainerStateTerminated{cs.LastTerminationState.Terminated, cs.State.Terminated} {
				if t == nil {
					continue
				}
				var res report.RestoreResult
				_ = json.Unmarshal([]byte(t.Message), &res)
				switch {
				case t.ExitCode == 0:
					st.verified, st.failed, st.trouble = true, false, ""
					st.result = res
					at := t.FinishedAt
					st.at = &at
				case t.ExitCode == report.ExitBackupUnusable:
					st.failed, st.result = true, res
				default:
					st.trouble = res.Reason
					if st.trouble == "" {
						st.trouble = fmt.Sprintf("exit code %d: %s", t.ExitCode, strings.TrimSpace(t.Message))
					}
				}
			}
		case restoreApplyContainer:
			if cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0 {
				st.verified, st.failed = true, false
			}
		}
	}
	if podStarted(pod) {
		st.verified, st.failed = true, false
	}
	if st.failed && st.result.Reason == "" {
		st.result.Reason = "the fetch found the backup unusable"
	}
	return st
}

// planRestore carries the request one step further; see the top of this
// file for the steps.
