package etcdbackup

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

const finalRequest = "demo/4"

// backingUpDemo is nightly, of the EtcdCluster demo, which hibernates and
// asks (or not) for a final backup.
func backingUpDemo(interval int64, request string, now time.Time) *Observed {
	b := newBackup(interval)
	b.Spec.EtcdEndpoints, b.Spec.ClusterName = nil, "demo"
	o := observe(b, now)
	c := &v1beta2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: ns}}
	c.Spec.Hibernated = true
	c.Status.Hibernation = &v1beta2.HibernationStatus{Backup: b.Name, Request: request}
	o.Clusters["demo"] = c
	return o
}

func TestFinalBackup(t *testing.T) {
	tookOneShot := func(o *Observed) {
		o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-2", Generation: 1, Start: metav1.NewTime(t0.Add(-time.Hour)), End: at(t0.Add(-time.Hour)), Succeeded: true}
		o.Backup.Status.Succeeded = true
	}
	tests := []struct {
		name, reason string
		in           *Observed
		want         outcomeSummary
		request      string // the run's, when one starts
	}{{
		name:    "asked",
		reason:  "the cluster's writes are fenced and it asks: the run starts at once, under the request",
		in:      backingUpDemo(3600, finalRequest, t0),
		want:    outcomeSummary{Pods: []string{"nightly-1"}, NewPod: "nightly-1", Progressing: "True/BackupRunning", LastRun: "nightly-1", Resync: resyncRunning},
		request: finalRequest,
	}, {
		name:    "asked of a one-shot already taken",
		reason:  "a one-shot EtcdBackup takes the final backup too, as a new object beside its own",
		in:      with(backingUpDemo(0, finalRequest, t0), tookOneShot),
		want:    outcomeSummary{Pods: []string{"nightly-3"}, NewPod: "nightly-3", Progressing: "True/BackupRunning", Succeeded: true, LastRun: "nightly-3", Resync: resyncRunning},
		request: finalRequest,
	}, {
		name:   "taken",
		reason: "a final run that succeeded for the request is not taken again",
		in: with(backingUpDemo(0, finalRequest, t0), func(o *Observed) {
			tookOneShot(o)
			o.Backup.Status.LastRun.Request = finalRequest
		}),
		want: outcomeSummary{Progressing: "False/Done", Succeeded: true, LastRun: "nightly-2 ended"},
	}, {
		name:   "failed: waiting",
		reason: "a failed final run waits for the backoff, as any failed run, and the failure is reported",
		in: with(backingUpDemo(0, finalRequest, t0.Add(5*time.Second)), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-2", Generation: 1, Start: metav1.NewTime(t0), End: at(t0), Reason: "Access Denied", ConsecutiveFailures: 1, Request: finalRequest}
		}),
		want: outcomeSummary{Progressing: "False/Scheduled", Degraded: ReasonBackupFailed, LastRun: "nightly-2 ended", Failures: 1, Resync: 5 * time.Second},
	}, {
		name:   "failed: retried",
		reason: "the cluster stays fenced while it asks: a failed final run is retried after the backoff",
		in: with(backingUpDemo(0, finalRequest, t0.Add(15*time.Second)), func(o *Observed) {
			o.Backup.Status.LastRun = &v1beta2.BackupRun{Name: "nightly-2", Generation: 1, Start: metav1.NewTime(t0), End: at(t0), Reason: "Access Denied", ConsecutiveFailures: 1, Request: finalRequest}
		}),
		want:    outcomeSummary{Pods: []string{"nightly-3"}, NewPod: "nightly-3", Progressing: "True/BackupRunning", LastRun: "nightly-3", Failures: 1, Resync: resyncRunning},
		request: finalRequest,
	}, {
		name:   "hibernated",
		reason: "the cluster hibernates and asks nothing: no run would find a member",
		in:     backingUpDemo(60, "", t0),
		want:   outcomeSummary{Progressing: "False/ClusterHibernated"},
	}, {
		name:   "hibernated, asked by an earlier hibernation",
		reason: "a request whose backup the cluster recorded is answered",
		in: with(backingUpDemo(60, finalRequest, t0), func(o *Observed) {
			o.Clusters["demo"].Status.Hibernation.Source = &v1beta2.ResolvedSource{SHA256: "ab12"}
		}),
		want: outcomeSummary{Progressing: "False/ClusterHibernated"},
	}, {
		name:   "another EtcdBackup's request",
		reason: "the cluster named another EtcdBackup: this one takes no final run, and none of its own while the cluster hibernates",
		in: with(backingUpDemo(60, finalRequest, t0), func(o *Observed) {
			o.Clusters["demo"].Status.Hibernation.Backup = "other"
		}),
		want: outcomeSummary{Progressing: "False/ClusterHibernated"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Plan(tt.in)
			if diff := cmp.Diff(tt.want, summarize(tt.in, d)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tt.reason, diff)
			}
			if tt.request == "" {
				return
			}
			if got := d.Status.LastRun.Request; got != tt.request {
				t.Errorf("the run's request in status is %q, want %q", got, tt.request)
			}
			pod := d.Children[len(d.Children)-1].Object.(*corev1.Pod)
			if got := pod.Annotations[AnnotationRequest]; got != tt.request {
				t.Errorf("the run Pod's %s is %q, want %q: a run the status missed is known by it", AnnotationRequest, got, tt.request)
			}
			args := pod.Spec.Containers[0].Args
			if !slices.Contains(args, "--periodic") || !slices.Contains(args, "--max-backups=0") {
				t.Errorf("the final run's args %v: it must be stored under a name of its own (--periodic) and prune nothing (--max-backups=0)", args)
			}
		})
	}
}
