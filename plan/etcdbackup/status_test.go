package etcdbackup

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/gitopstest"
)

type backupHealth struct {
	Tools                       gitopstest.Verdict
	Ready, Reconciling, Stalled string
}

var (
	healthy     = gitopstest.Verdict{KStatus: "Current", Flux: "Current", ArgoCD: "Healthy"}
	progressing = gitopstest.Verdict{KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"}
	degraded    = gitopstest.Verdict{KStatus: "Failed", Flux: "Failed", ArgoCD: "Degraded"}
)

func healthOf(t *testing.T, b *v1beta2.EtcdBackup, st v1beta2.BackupStatus) backupHealth {
	t.Helper()
	obj := *b
	obj.TypeMeta = metav1.TypeMeta{APIVersion: v1beta2.APIVersion, Kind: v1beta2.KindBackup}
	obj.Status = st
	v, err := gitopstest.Judge(obj)
	if err != nil {
		t.Fatal(err)
	}
	h := backupHealth{Tools: v}
	for _, c := range st.Conditions {
		s := string(c.Status) + "/" + c.Reason
		switch c.Type {
		case v1beta2.ConditionReady:
			h.Ready = s
		case v1beta2.ConditionReconciling:
			h.Reconciling = s
		case v1beta2.ConditionStalled:
			h.Stalled = s
		}
	}
	return h
}

func TestHealth(t *testing.T) {
	recorded := func(name string, start time.Time, ok bool, failures int) *v1beta2.BackupRun {
		return &v1beta2.BackupRun{Name: name, Generation: 1, Start: metav1.NewTime(start), End: at(start.Add(3 * time.Second)), Succeeded: ok, ConsecutiveFailures: failures}
	}
	succeeded := func(o *Observed) {
		o.Backup.Status.Succeeded = true
		o.Backup.Status.LastSuccessDate = at(t0.Add(3 * time.Second))
		o.Backup.Status.LastRun = recorded("nightly-1", t0, true, 0)
	}
	tests := []struct {
		name   string
		reason string
		in     *Observed
		want   backupHealth
	}{{
		name:   "first run",
		reason: "no backup yet: the object waits for its first",
		in:     observe(newBackup(0), t0),
		want:   backupHealth{progressing, "False/BackupRunning", "True/BackupRunning", "False/AsExpected"},
	}, {
		name:   "one-shot done",
		reason: "the backup the spec asks for is taken",
		in:     with(observe(newBackup(0), t0.Add(time.Hour)), succeeded),
		want:   backupHealth{healthy, "True/Done", "False/Done", "False/AsExpected"},
	}, {
		name:   "one-shot of a changed spec",
		reason: "a new generation asks for a new backup: not Ready until it is taken",
		in:     with(observe(newBackup(0), t0.Add(time.Hour)), func(o *Observed) { succeeded(o); o.Backup.Generation = 2 }),
		want:   backupHealth{progressing, "False/BackupRunning", "True/BackupRunning", "False/AsExpected"},
	}, {
		name:   "periodic, a routine run in flight",
		reason: "the last backup succeeded: a scheduled run is no reason for a GitOps tool to wait",
		in: with(observe(newBackup(600), t0.Add(11*time.Minute), runPodAt("nightly-2", t0.Add(10*time.Minute), corev1.PodRunning, nil)), func(o *Observed) {
			succeeded(o)
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-2", Generation: 1, Start: metav1.NewTime(t0.Add(10 * time.Minute))}
		}),
		want: backupHealth{healthy, "True/Done", "False/BackupRunning", "False/AsExpected"},
	}, {
		name:   "failed once",
		reason: "one failure may be a blip: retried, not stalled",
		in: with(observe(newBackup(600), t0.Add(5*time.Second)), func(o *Observed) {
			o.Backup.Status.LastRun = recorded("nightly-1", t0, false, 1)
		}),
		want: backupHealth{progressing, "False/BackupFailed", "False/Scheduled", "False/AsExpected"},
	}, {
		name:   "retrying after a failure",
		reason: "the retry run is what the object waits for",
		in: with(observe(newBackup(600), t0.Add(time.Minute)), func(o *Observed) {
			o.Backup.Status.LastRun = recorded("nightly-1", t0, false, 1)
		}),
		want: backupHealth{progressing, "False/BackupRunning", "True/BackupRunning", "False/AsExpected"},
	}, {
		name:   "failed three times in a row",
		reason: "the backoff has passed any blip: a person must look, while the runs go on",
		in: with(observe(newBackup(600), t0.Add(time.Second)), func(o *Observed) {
			o.Backup.Status.LastRun = recorded("nightly-3", t0, false, StalledAfterFailures)
		}),
		want: backupHealth{degraded, "False/BackupFailed", "False/BackupFailed", "True/BackupFailed"},
	}, {
		name:   "invalid spec",
		in:     with(observe(newBackup(0), t0), func(o *Observed) { o.SpecErrors = field.ErrorList{field.Required(field.NewPath("spec", "s3"), "")} }),
		reason: "no run starts until a person fixes the spec",
		want:   backupHealth{degraded, "False/InvalidSpec", "False/InvalidSpec", "True/InvalidSpec"},
	}, {
		name:   "Secret not there yet",
		reason: "a GitOps tool may apply the Secret after the EtcdBackup: waited for, not stalled",
		in:     with(observe(newBackup(0), t0), func(o *Observed) { delete(o.Secrets, "aws") }),
		want:   backupHealth{progressing, "False/WaitingForObject", "False/WaitingForObject", "False/AsExpected"},
	}, {
		name:   "Secret without credentials",
		reason: "the Secret is there and unusable: a person must fix it",
		in:     with(observe(newBackup(0), t0), func(o *Observed) { delete(o.Secrets["aws"].Data, "credentials") }),
		want:   backupHealth{degraded, "False/SecretInvalid", "False/SecretInvalid", "True/SecretInvalid"},
	}, {
		name:   "EtcdCluster not there yet",
		reason: "the cluster may be applied after the backup",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.Backup.Spec.EtcdEndpoints, o.Backup.Spec.ClusterName = nil, "demo"
		}),
		want: backupHealth{progressing, "False/WaitingForObject", "False/WaitingForObject", "False/AsExpected"},
	}, {
		name:   "https without a client certificate",
		reason: "the spec cannot work as written",
		in: with(observe(newBackup(0), t0), func(o *Observed) {
			o.Backup.Spec.EtcdEndpoints = []string{"https://demo-client.prod.svc:2379"}
		}),
		want: backupHealth{degraded, "False/ClientTLSMissing", "False/ClientTLSMissing", "True/ClientTLSMissing"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Plan(tt.in)
			if diff := cmp.Diff(tt.want, healthOf(t, tt.in.Backup, d.Status)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tt.reason, diff)
			}
		})
	}
}

// TestHealthIsSteady: a backup at rest renders the same status an hour
// later, so that the kstatus conditions cause no sync loop.
func TestHealthIsSteady(t *testing.T) {
	o := observe(newBackup(0), t0.Add(time.Hour))
	o.Backup.Status = v1beta2.BackupStatus{Succeeded: true, LastSuccessDate: at(t0),
		LastRun: &v1beta2.BackupRun{Name: "nightly-1", Generation: 1, Start: metav1.NewTime(t0), End: at(t0), Succeeded: true}}
	first := Plan(o).Status
	o.Backup.Status = first
	o.Now = o.Now.Add(time.Hour)
	if d := cmp.Diff(first, Plan(o).Status); d != "" {
		t.Errorf("(-first +an hour later):\n%s", d)
	}
}
