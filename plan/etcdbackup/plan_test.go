package etcdbackup

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

var t0 = time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC)

const ns = "prod"

func newBackup(interval int64) *v1beta2.EtcdBackup {
	return &v1beta2.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns, Generation: 1},
		Spec: v1beta2.BackupSpec{
			EtcdEndpoints: []string{"http://demo-client.prod.svc:2379"},
			StorageType:   v1beta2.BackupStorageS3,
			BackupPolicy:  &v1beta2.BackupPolicy{BackupIntervalInSecond: interval, MaxBackups: 2},
			S3:            &v1beta2.S3BackupSource{Path: "backups/demo.db", AWSSecret: "aws", Endpoint: "http://s3.local:7070", ForcePathStyle: true},
		},
	}
}

func observe(b *v1beta2.EtcdBackup, now time.Time, pods ...*corev1.Pod) *Observed {
	o := &Observed{
		Backup: b, Now: now, AgentImage: "ghcr.io/etcdhook/etcd-hook:test",
		Pods:     map[string]*corev1.Pod{},
		Secrets:  map[string]*corev1.Secret{"aws": {Data: map[string][]byte{"credentials": []byte("[default]\n"), "config": []byte("[default]\n")}}},
		Clusters: map[string]*v1beta2.EtcdCluster{},
	}
	for _, p := range pods {
		o.Pods[p.Name] = p
	}
	return o
}

func runPodAt(name string, created time.Time, phase corev1.PodPhase, term *corev1.ContainerStateTerminated) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.NewTime(created), Labels: map[string]string{LabelGeneration: "1"}},
		Status:     corev1.PodStatus{Phase: phase},
	}
	if term != nil {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Terminated: term}}}
	}
	return p
}

func succeededRun(name string, created time.Time) *corev1.Pod {
	res, _ := json.Marshal(report.BackupResult{Succeeded: true, EtcdVersion: "3.6.16", EtcdRevision: 1234, ClusterID: "cafe",
		Location: "s3://backups/demo.db", Size: 4096, SHA256: "ab12", Start: created, End: created.Add(3 * time.Second)})
	return runPodAt(name, created, corev1.PodSucceeded, &corev1.ContainerStateTerminated{ExitCode: 0, Message: string(res)})
}

func failedRun(name string, created time.Time, reason string) *corev1.Pod {
	res, _ := json.Marshal(report.BackupResult{Reason: reason, Start: created, End: created.Add(time.Second)})
	return runPodAt(name, created, corev1.PodFailed, &corev1.ContainerStateTerminated{ExitCode: 1, Message: string(res)})
}

func at(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

// outcomeSummary is what a case is about.
type outcomeSummary struct {
	Pods        []string
	NewPod      string
	Progressing string
	Degraded    string
	Succeeded   bool
	Reason      string
	LastRun     string
	Failures    int
	Revision    int64
	Resync      time.Duration
}

func summarize(o *Observed, d Decision) outcomeSummary {
	s := outcomeSummary{Succeeded: d.Status.Succeeded, Reason: d.Status.Reason, Revision: d.Status.EtcdRevision, Resync: d.ResyncAfter}
	for _, c := range d.Children {
		s.Pods = append(s.Pods, c.Name)
		if _, ok := o.Pods[c.Name]; !ok {
			s.NewPod = c.Name
		}
	}
	for _, c := range d.Status.Conditions {
		switch c.Type {
		case v1beta2.ConditionProgressing:
			s.Progressing = string(c.Status) + "/" + c.Reason
		case v1beta2.ConditionDegraded:
			if c.Status == metav1.ConditionTrue {
				s.Degraded = c.Reason
			}
		}
	}
	if r := d.Status.LastRun; r != nil {
		s.LastRun, s.Failures = r.Name, r.ConsecutiveFailures
		if r.End != nil {
			s.LastRun += " ended"
		}
	}
	return s
}

func with(o *Observed, f func(*Observed)) *Observed { f(o); return o }

func TestPlan(t *testing.T) {
	recorded := func(name string, start time.Time, ok bool, failures int) *v1beta2.BackupRun {
		return &v1beta2.BackupRun{Name: name, Generation: 1, Start: metav1.NewTime(start), End: at(start.Add(3 * time.Second)), Succeeded: ok, ConsecutiveFailures: failures}
	}
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   outcomeSummary
	}{{
		name:   "first one-shot",
		reason: "no backup taken yet: the first run starts at once",
		in:     observe(newBackup(0), t0),
		want:   outcomeSummary{Pods: []string{"nightly-1"}, NewPod: "nightly-1", Progressing: "True/BackupRunning", LastRun: "nightly-1", Resync: resyncRunning},
	}, {
		name:   "Secret missing",
		reason: "a run would wait for the Secret in ContainerCreating and say why nowhere the hook can see: no run, and a reason naming it",
		in:     with(observe(newBackup(0), t0), func(o *Observed) { delete(o.Secrets, "aws") }),
		want: outcomeSummary{Progressing: "False/SecretInvalid", Degraded: ReasonSecretInvalid,
			Reason: `Secret "aws" (spec.s3.awsSecret) not found in namespace prod`, Resync: resyncBlocked},
	}, {
		name:   "Secret without credentials",
		reason: "the key the agent needs is named",
		in:     with(observe(newBackup(0), t0), func(o *Observed) { delete(o.Secrets["aws"].Data, "credentials") }),
		want: outcomeSummary{Progressing: "False/SecretInvalid", Degraded: ReasonSecretInvalid,
			Reason: `Secret "aws" (spec.s3.awsSecret) has no key "credentials": it must hold the AWS shared files "credentials" and "config"`, Resync: resyncBlocked},
	}, {
		name:   "claim missing",
		reason: "a volume destination needs its claim: no run, a reason naming it",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.Backup.Spec.StorageType, o.Backup.Spec.S3 = v1beta2.BackupStoragePVC, nil
			o.Backup.Spec.PVC = &v1beta2.PVCBackupSource{ClaimName: "backups"}
		}),
		want: outcomeSummary{Progressing: "False/ClaimNotFound", Degraded: ReasonClaimNotFound,
			Reason: `PersistentVolumeClaim "backups" (spec.pvc.claimName) not found in namespace prod`, Resync: resyncBlocked},
	}, {
		name:   "invalid spec",
		reason: "an invalid spec starts nothing and says which field",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.SpecErrors = field.ErrorList{field.Invalid(field.NewPath("spec", "s3", "path"), "nobucket", `must be "<bucket>/<key>"`)}
		}),
		want: outcomeSummary{Progressing: "False/InvalidSpec", Degraded: ReasonInvalidSpec,
			Reason: `the spec is invalid, so no backup is taken: spec.s3.path: Invalid value: "nobucket": must be "<bucket>/<key>"`, Resync: resyncBlocked},
	}, {
		name:   "EtcdCluster not found",
		reason: "clusterName names a cluster of the namespace, which must exist",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.Backup.Spec.EtcdEndpoints, o.Backup.Spec.ClusterName = nil, "demo"
		}),
		want: outcomeSummary{Progressing: "False/ClusterNotFound", Degraded: ReasonClusterNotFound,
			Reason: `EtcdCluster "demo" not found in namespace prod`, Resync: resyncBlocked},
	}, {
		name:   "run in flight",
		reason: "at most one run: the running Pod is kept and nothing else starts",
		in: with(observe(newBackup(0), t0.Add(time.Minute), runPodAt("nightly-1", t0, corev1.PodRunning, nil)), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-1", Generation: 1, Start: metav1.NewTime(t0)}
		}),
		want: outcomeSummary{Pods: []string{"nightly-1"}, Progressing: "True/BackupRunning", LastRun: "nightly-1", Resync: resyncRunning},
	}, {
		name:   "run succeeded, not yet recorded",
		reason: "the result goes into status and the Pod stays until the status that records it comes back",
		in: with(observe(newBackup(0), t0.Add(time.Minute), succeededRun("nightly-1", t0)), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-1", Generation: 1, Start: metav1.NewTime(t0)}
		}),
		want: outcomeSummary{Pods: []string{"nightly-1"}, Progressing: "False/Done", Succeeded: true, LastRun: "nightly-1 ended", Revision: 1234},
	}, {
		name:   "one-shot done",
		reason: "recorded: the Pod goes, and a one-shot backup of this generation is not taken again",
		in: with(observe(newBackup(0), t0.Add(time.Hour), succeededRun("nightly-1", t0)), func(o *Observed) {
			o.Backup.Status.LastRun = recorded("nightly-1", t0, true, 0)
			o.Backup.Status.Succeeded = true
		}),
		want: outcomeSummary{Progressing: "False/Done", Succeeded: true, LastRun: "nightly-1 ended"},
	}, {
		name:   "run failed",
		reason: "a failed run's reason goes into status, and the failure is counted",
		in: with(observe(newBackup(0), t0.Add(time.Minute), failedRun("nightly-1", t0, "start the upload: s3.local refused the credentials (SignatureDoesNotMatch)")), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-1", Generation: 1, Start: metav1.NewTime(t0)}
		}),
		want: outcomeSummary{Pods: []string{"nightly-1"}, Progressing: "False/Scheduled", Degraded: ReasonBackupFailed,
			Reason: "start the upload: s3.local refused the credentials (SignatureDoesNotMatch)", LastRun: "nightly-1 ended", Failures: 1, Resync: time.Second},
	}, {
		name:   "retry after backoff",
		reason: "the third failure waits 40 s, then one new run starts, carrying the count",
		in: with(observe(newBackup(0), t0.Add(time.Minute), failedRun("nightly-3", t0, "x")), func(o *Observed) {
			o.Backup.Status.LastRun = recorded("nightly-3", t0, false, 3)
		}),
		want: outcomeSummary{Pods: []string{"nightly-4"}, NewPod: "nightly-4", Progressing: "True/BackupRunning", LastRun: "nightly-4", Failures: 3, Resync: resyncRunning},
	}, {
		name:   "periodic, not yet due",
		reason: "the next run is due one period after the last one started",
		in: with(observe(newBackup(600), t0.Add(4*time.Minute)), func(o *Observed) {
			o.Backup.Status.LastRun = recorded("nightly-7", t0, true, 0)
			o.Backup.Status.Succeeded = true
		}),
		want: outcomeSummary{Progressing: "False/Scheduled", Succeeded: true, LastRun: "nightly-7 ended", Resync: 6 * time.Minute},
	}, {
		name:   "periodic, periods missed",
		reason: "a hook down for ten periods takes one backup at once, not ten",
		in: with(observe(newBackup(60), t0.Add(10*time.Minute)), func(o *Observed) {
			o.Backup.Status.LastRun = recorded("nightly-7", t0, true, 0)
		}),
		want: outcomeSummary{Pods: []string{"nightly-8"}, NewPod: "nightly-8", Progressing: "True/BackupRunning", LastRun: "nightly-8", Resync: resyncRunning},
	}, {
		name:   "a run the status missed",
		reason: "the status write that recorded nightly-8's start was lost: the Pod is adopted as the current run, not duplicated",
		in: with(observe(newBackup(60), t0.Add(10*time.Minute), runPodAt("nightly-8", t0.Add(9*time.Minute), corev1.PodRunning, nil)), func(o *Observed) {
			o.Backup.Status.LastRun = recorded("nightly-7", t0, true, 0)
		}),
		want: outcomeSummary{Pods: []string{"nightly-8"}, Progressing: "True/BackupRunning", LastRun: "nightly-8", Resync: resyncRunning},
	}, {
		name:   "started run not seen",
		reason: "the status says nightly-2 started but no Pod shows (a cache behind, or deleted): it is asked for again, under the same name",
		in: with(observe(newBackup(0), t0.Add(time.Minute)), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-2", Generation: 1, Start: metav1.NewTime(t0)}
		}),
		want: outcomeSummary{Pods: []string{"nightly-2"}, NewPod: "nightly-2", Progressing: "True/BackupRunning", LastRun: "nightly-2", Resync: resyncRunning},
	}, {
		name:   "started run gone for good",
		reason: "past its timeout it counts as failed, and a one-shot is retried",
		in: with(observe(newBackup(0), t0.Add(DefaultTimeout+startGrace+time.Second)), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-2", Generation: 1, Start: metav1.NewTime(t0)}
		}),
		want: outcomeSummary{Progressing: "False/Scheduled", Degraded: ReasonBackupFailed,
			Reason: "the backup Pod nightly-2 is gone and reported no result", LastRun: "nightly-2 ended", Failures: 1, Resync: 10 * time.Second},
	}, {
		name:   "stale runs",
		reason: "only the newest run Pod is kept: at most one runs",
		in: with(observe(newBackup(60), t0.Add(time.Minute), runPodAt("nightly-2", t0, corev1.PodRunning, nil), runPodAt("nightly-3", t0, corev1.PodRunning, nil)), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-3", Generation: 1, Start: metav1.NewTime(t0)}
		}),
		want: outcomeSummary{Pods: []string{"nightly-3"}, Progressing: "True/BackupRunning", LastRun: "nightly-3", Resync: resyncRunning},
	}, {
		name:   "stuck run",
		reason: "a run Pod that has not finished long after its timeout is given up, with what it waits on",
		in: with(observe(newBackup(0), t0.Add(DefaultTimeout+startGrace+time.Second), runPodAt("nightly-1", t0, corev1.PodPending, nil)), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-1", Generation: 1, Start: metav1.NewTime(t0)}
			o.Pods["nightly-1"].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}
		}),
		want: outcomeSummary{Progressing: "False/Scheduled", Degraded: ReasonBackupFailed,
			Reason: "the backup Pod nightly-1 did not finish within 35m0s (waiting: ImagePullBackOff )", LastRun: "nightly-1 ended", Failures: 1, Resync: 10 * time.Second},
	}, {
		name:   "killed without a result",
		reason: "an agent killed for memory leaves no result: the kubelet's word is the reason",
		in: with(observe(newBackup(0), t0.Add(time.Minute), runPodAt("nightly-1", t0, corev1.PodFailed, &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"})), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-1", Generation: 1, Start: metav1.NewTime(t0)}
		}),
		want: outcomeSummary{Pods: []string{"nightly-1"}, Progressing: "False/Scheduled", Degraded: ReasonBackupFailed,
			Reason: "the backup container ended without a result: OOMKilled (exit code 137) ", LastRun: "nightly-1 ended", Failures: 1, Resync: 10 * time.Second},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(tt.in, Plan(tt.in))
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("%s\n(-want +got):\n%s", tt.reason, d)
			}
		})
	}
}

// TestRunPod checks what a run runs: the agent, with the Secret, no
// Kubernetes credentials, and the flags the spec asks for.
func TestRunPod(t *testing.T) {
	o := observe(newBackup(600), t0)
	d := Plan(o)
	if len(d.Children) != 1 {
		t.Fatalf("children %v", d.Children)
	}
	pod := d.Children[0].Object.(*corev1.Pod)
	c := pod.Spec.Containers[0]
	want := []string{"backup", "--endpoints=http://demo-client.prod.svc:2379", "--timeout=30m0s", "--result-file=/dev/termination-log",
		"--s3-path=backups/demo.db", "--aws-dir=/etc/etcd-backup/aws", "--s3-endpoint=http://s3.local:7070", "--s3-force-path-style", "--periodic", "--max-backups=2"}
	if d := cmp.Diff(want, c.Args); d != "" {
		t.Errorf("args (-want +got):\n%s", d)
	}
	if c.Image != o.AgentImage || !slices.Equal(c.Command, []string{"/etcd-hook"}) {
		t.Errorf("image %q command %v", c.Image, c.Command)
	}
	if *pod.Spec.AutomountServiceAccountToken || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("automount %v, restartPolicy %s: want no token and Never", *pod.Spec.AutomountServiceAccountToken, pod.Spec.RestartPolicy)
	}
	if v := pod.Spec.Volumes[0]; v.Secret == nil || v.Secret.SecretName != "aws" || c.VolumeMounts[0].MountPath != "/etc/etcd-backup/aws" || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("volume %+v mount %+v: want Secret aws read-only at /etc/etcd-backup/aws", v, c.VolumeMounts[0])
	}
	if pod.Labels[LabelBackup] != "nightly" {
		t.Errorf("labels %v", pod.Labels)
	}

	// clusterName: the EtcdCluster's client Service, with its domain.
	o = with(observe(newBackup(0), t0), func(o *Observed) {
		o.Backup.Spec.EtcdEndpoints, o.Backup.Spec.ClusterName = nil, "demo"
		o.Clusters["demo"] = &v1beta2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns},
			Spec: v1beta2.ClusterSpec{Pod: &v1beta2.PodPolicy{ClusterDomain: "cluster.local"}}}
	})
	args := Plan(o).Children[0].Object.(*corev1.Pod).Spec.Containers[0].Args
	if !slices.Contains(args, "--endpoints=http://demo-client.prod.svc.cluster.local:2379") {
		t.Errorf("args %v: want the cluster's client Service", args)
	}
}

// TestRecordedSuccess checks the CoreOS status fields and the new ones.
func TestRecordedSuccess(t *testing.T) {
	o := with(observe(newBackup(0), t0.Add(time.Minute), succeededRun("nightly-1", t0)), func(o *Observed) {
		o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-1", Generation: 1, Start: metav1.NewTime(t0)}
	})
	st := Plan(o).Status
	end := metav1.NewTime(t0.Add(3 * time.Second))
	want := v1beta2.StoredBackup{Location: "s3://backups/demo.db", Size: 4096, SHA256: "ab12", Revision: 1234, EtcdVersion: "3.6.16", ClusterID: "cafe", Time: end}
	if d := cmp.Diff(&want, st.LastBackup); d != "" {
		t.Errorf("lastBackup (-want +got):\n%s", d)
	}
	if !st.Succeeded || st.EtcdVersion != "3.6.16" || st.EtcdRevision != 1234 || !st.LastSuccessDate.Equal(&end) || st.ObservedGeneration != 1 {
		t.Errorf("CoreOS fields: %+v", st)
	}
	// Answering the same request again gives the same status: no sync loop.
	o.Backup.Status = st
	st2 := Plan(o).Status
	if d := cmp.Diff(st, st2); d != "" {
		t.Errorf("status changes from one sync to the next (-first +second):\n%s", d)
	}
	if !strings.Contains(st2.Conditions[0].Message, "one-shot") {
		t.Errorf("Progressing message %q", st2.Conditions[0].Message)
	}
}

// TestFinalize: the run Pods go; finalized once none is left.
func TestFinalize(t *testing.T) {
	o := observe(newBackup(0), t0, runPodAt("nightly-1", t0, corev1.PodRunning, nil))
	o.Finalizing = true
	if d := Plan(o); len(d.Children) != 0 || d.Finalized {
		t.Errorf("with a run Pod: children %v finalized %v", d.Children, d.Finalized)
	}
	o.Pods = map[string]*corev1.Pod{}
	if d := Plan(o); !d.Finalized {
		t.Error("without Pods: not finalized")
	}
}

// TestRunPodOnClaim: a volume destination mounts the claim and names the
// file; no Secret is mounted.
func TestRunPodOnClaim(t *testing.T) {
	o := with(observe(newBackup(0), t0), func(o *Observed) {
		o.Backup.Spec.StorageType, o.Backup.Spec.S3 = v1beta2.BackupStoragePVC, nil
		o.Backup.Spec.PVC = &v1beta2.PVCBackupSource{ClaimName: "backups", Path: "demo/etcd.db"}
		o.Claims = map[string]*corev1.PersistentVolumeClaim{"backups": {}}
	})
	d := Plan(o)
	if len(d.Children) != 1 {
		t.Fatalf("children %v, status %+v", d.Children, d.Status)
	}
	pod := d.Children[0].Object.(*corev1.Pod)
	c := pod.Spec.Containers[0]
	want := []string{"backup", "--endpoints=http://demo-client.prod.svc:2379", "--timeout=30m0s", "--result-file=/dev/termination-log",
		"--dir=/var/etcd-backup", "--file=demo/etcd.db", "--volume=backups"}
	if d := cmp.Diff(want, c.Args); d != "" {
		t.Errorf("args (-want +got):\n%s", d)
	}
	if v := pod.Spec.Volumes; len(v) != 1 || v[0].PersistentVolumeClaim == nil || v[0].PersistentVolumeClaim.ClaimName != "backups" || c.VolumeMounts[0].MountPath != "/var/etcd-backup" {
		t.Errorf("volumes %+v mounts %+v", v, c.VolumeMounts)
	}
}

// TestCoreOSOneShotIsNotTakenAgain: a one-shot EtcdBackup the CoreOS
// backup operator completed carries only its status fields (succeeded,
// etcdRevision, lastSuccessDate), no run of this hook. Taking it again
// would overwrite the object it stored with a snapshot of now: the user's
// backup of then would be gone.
func TestCoreOSOneShotIsNotTakenAgain(t *testing.T) {
	taken := metav1.NewTime(t0.Add(-24 * time.Hour))
	tests := []struct {
		name, reason string
		interval     int64
		status       v1beta2.BackupStatus
		runs         bool
	}{
		{"CoreOS one-shot", "succeeded before this hook: kept", 0, v1beta2.BackupStatus{Succeeded: true, EtcdVersion: "3.2.13", EtcdRevision: 99, LastSuccessDate: &taken}, false},
		{"CoreOS one-shot that failed", "nothing stored to keep: taken now", 0, v1beta2.BackupStatus{Succeeded: false, Reason: "failed to connect"}, true},
		{"CoreOS periodic", "periodic backups go on, each to a new object", 3600, v1beta2.BackupStatus{Succeeded: true, LastSuccessDate: &taken}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackup(tc.interval)
			b.Status = tc.status
			d := Plan(observe(b, t0))
			if runs := len(d.Children) > 0; runs != tc.runs {
				t.Errorf("%s: a run started %v, want %v (children %v)", tc.reason, runs, tc.runs, d.Children)
			}
			if !tc.runs && (d.Status.LastSuccessDate == nil || !d.Status.LastSuccessDate.Equal(&taken) || d.Status.EtcdRevision != 99) {
				t.Errorf("%s: the CoreOS record changed: %+v", tc.reason, d.Status)
			}
		})
	}
}
