package etcdbackup

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

func continuousBackup(delta int64) *v1beta2.EtcdBackup {
	b := newBackup(3600)
	b.Spec.BackupPolicy.DeltaIntervalInSecond = delta
	return b
}

// runningArchiver is the archiver the planner renders for o, observed
// running since created.
func runningArchiver(t *testing.T, o *Observed, created time.Time) *corev1.Pod {
	t.Helper()
	d := Plan(o)
	for _, c := range d.Children {
		if pod, ok := c.Object.(*corev1.Pod); ok && IsArchiver(pod) {
			pod = pod.DeepCopy()
			pod.CreationTimestamp = metav1.NewTime(created)
			pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.9",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
			return pod
		}
	}
	t.Fatalf("no archiver among %d children", len(d.Children))
	return nil
}

func archiveStatus(now time.Time, f func(*report.ArchiveStatus)) *report.ArchiveStatus {
	snap, delta := t0, now.Add(-time.Second)
	st := &report.ArchiveStatus{History: "cafe", ChainStart: 100, LastSnapshotRevision: 100, LastSnapshotTime: &snap,
		LastDeltaRevision: 5000, LastDeltaTime: &delta, ReceivedRevision: 5000, Now: now}
	if f != nil {
		f(st)
	}
	return st
}

func condition(st v1beta2.BackupStatus, t v1beta2.ConditionType) string {
	for _, c := range st.Conditions {
		if c.Type == t {
			return string(c.Status) + "/" + c.Reason
		}
	}
	return ""
}

func TestPlanContinuous(t *testing.T) {
	now := t0.Add(time.Hour)
	base := func() *Observed { return observe(continuousBackup(2), now) }
	archiver := runningArchiver(t, base(), now.Add(-10*time.Minute))
	withArchiver := func(obs ArchiveObservation, f func(*Observed)) *Observed {
		o := base()
		o.Pods[archiver.Name] = archiver
		o.Archive = map[string]ArchiveObservation{archiver.Name: obs}
		if f != nil {
			f(o)
		}
		return o
	}
	behind := func(d time.Duration) *report.ArchiveStatus {
		return archiveStatus(now, func(s *report.ArchiveStatus) { old := now.Add(-d); s.OldestUnstored = &old })
	}
	type summary struct {
		Pods        []string
		BackupReady string
		Ready       string
		Reconciling string
		Stalled     string
		Succeeded   bool
		Revision    int64
		RPO         int64
		Resync      time.Duration
	}
	tests := []struct {
		name, reason string
		o            *Observed
		want         summary
	}{
		{
			name: "first sync", reason: "the archiver is created, and the backup waits for it",
			o:    base(),
			want: summary{Pods: []string{archiver.Name}, BackupReady: "False/ArchiverStarting", Ready: "False/ArchiverStarting", Reconciling: "True/ArchiverStarting", Stalled: "False", Resync: resyncArchiving},
		},
		{
			name: "archiving", reason: "the archiver keeps up: BackupReady, Ready, the newest delta and the RPO in the status",
			o:    withArchiver(ArchiveObservation{Status: behind(time.Second)}, nil),
			want: summary{Pods: []string{archiver.Name}, BackupReady: "True/Archiving", Ready: "True/Archiving", Reconciling: "False", Stalled: "False", Succeeded: true, Revision: 5000, RPO: 1, Resync: resyncArchiving},
		},
		{
			name: "behind", reason: "a change 7 s old not stored at a 2 s interval is past 3 intervals",
			o:    withArchiver(ArchiveObservation{Status: behind(7 * time.Second)}, nil),
			want: summary{Pods: []string{archiver.Name}, BackupReady: "False/DeltasBehind", Ready: "False/DeltasBehind", Reconciling: "False", Stalled: "False", Revision: 5000, RPO: 7, Resync: resyncArchiving},
		},
		{
			name: "first snapshot", reason: "no chain yet: the archiver is taking its first snapshot",
			o:    withArchiver(ArchiveObservation{Status: &report.ArchiveStatus{Now: now}}, nil),
			want: summary{Pods: []string{archiver.Name}, BackupReady: "False/FirstSnapshotPending", Ready: "False/FirstSnapshotPending", Reconciling: "True/FirstSnapshotPending", Stalled: "False", Resync: resyncArchiving},
		},
		{
			name: "silent", reason: "an archiver up for 10 minutes that does not answer is reported",
			o:    withArchiver(ArchiveObservation{Error: "connection refused"}, nil),
			want: summary{Pods: []string{archiver.Name}, BackupReady: "False/ArchiverNotReporting", Ready: "False/ArchiverNotReporting", Reconciling: "False", Stalled: "False", Resync: resyncArchiving},
		},
		{
			name: "key Secret deleted", reason: "a running archiver keeps running on what it mounted; the condition names the Secret",
			o: withArchiver(ArchiveObservation{Status: behind(0)}, func(o *Observed) {
				o.Backup.Spec.Encryption = &v1beta2.EncryptionKey{SecretName: "backup-key", Key: "key"}
			}),
			want: summary{Pods: []string{archiver.Name}, BackupReady: "False/SecretInvalid", Ready: "False/WaitingForObject", Reconciling: "False/WaitingForObject", Stalled: "False", Revision: 5000, RPO: 0, Resync: resyncBlocked},
		},
		{
			name: "key too short", reason: "a key of 16 bytes is AES-128's: refused, and no archiver starts",
			o: with(base(), func(o *Observed) {
				o.Backup.Spec.Encryption = &v1beta2.EncryptionKey{SecretName: "backup-key", Key: "key"}
				o.Secrets["backup-key"] = &corev1.Secret{Data: map[string][]byte{"key": []byte("0123456789abcdef")}}
			}),
			want: summary{BackupReady: "False/EncryptionKeyInvalid", Ready: "False/EncryptionKeyInvalid", Reconciling: "False/EncryptionKeyInvalid", Stalled: "True/EncryptionKeyInvalid", Resync: resyncBlocked},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Plan(tc.o)
			got := summary{
				BackupReady: condition(d.Status, ConditionBackupReady), Ready: condition(d.Status, v1beta2.ConditionReady),
				Reconciling: condition(d.Status, v1beta2.ConditionReconciling), Stalled: condition(d.Status, v1beta2.ConditionStalled),
				Succeeded: d.Status.Succeeded, Revision: d.Status.EtcdRevision, Resync: d.ResyncAfter,
			}
			got.Stalled, _, _ = strings.Cut(got.Stalled, "/AsExpected")
			if got.Stalled == "False" || strings.HasPrefix(got.Stalled, "False/") {
				got.Stalled = "False"
			}
			for _, c := range d.Children {
				got.Pods = append(got.Pods, c.Name)
			}
			if d.Status.RPOSeconds != nil {
				got.RPO = *d.Status.RPOSeconds
			}
			if got.Reconciling == "False/"+ReasonArchiving || got.Reconciling == "False/"+ReasonDone || got.Reconciling == "False/"+ReasonRunning {
				got.Reconciling = "False"
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: (-want +got)\n%s", tc.reason, diff)
			}
		})
	}
}

// TestArchiverPod checks what the archiver runs: the destination, the
// intervals, the key mounted (never in the arguments), restarts always,
// and a name that changes with what it runs.
func TestArchiverPod(t *testing.T) {
	now := t0
	o := observe(continuousBackup(2), now)
	o.Backup.Spec.BackupPolicy.CompressSnapshots = true
	o.Backup.Spec.Encryption = &v1beta2.EncryptionKey{SecretName: "backup-key", Key: "key"}
	key := strings.Repeat("ab", 32)
	o.Secrets["backup-key"] = &corev1.Secret{Data: map[string][]byte{"key": []byte(key)}}
	pod := runningArchiver(t, o, now)
	args := pod.Spec.Containers[0].Args
	for _, want := range []string{"archive", "--delta-interval=2s", "--snapshot-interval=1h0m0s", "--max-snapshots=2", "--compress-snapshots",
		"--key-file=/etc/etcd-backup/key/key", "--s3-path=backups/demo.db", "--endpoints=http://demo-client.prod.svc:2379"} {
		if !slices.Contains(args, want) {
			t.Errorf("archiver args %q lack %q", args, want)
		}
	}
	for _, a := range args {
		if strings.Contains(a, key) {
			t.Errorf("the key is in the archiver's arguments: %q", a)
		}
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyAlways || pod.Spec.ActiveDeadlineSeconds != nil {
		t.Errorf("restartPolicy %s, activeDeadlineSeconds %v: an archiver runs until the spec changes", pod.Spec.RestartPolicy, pod.Spec.ActiveDeadlineSeconds)
	}
	if n := len(pod.Name); n > 253 || !strings.HasPrefix(pod.Name, "nightly-pitr-") {
		t.Errorf("archiver name %q", pod.Name)
	}

	// A spec change renders a new archiver; the old one runs on until
	// the new one is ready, then goes.
	o.Pods[pod.Name] = pod
	o.Backup.Spec.BackupPolicy.DeltaIntervalInSecond = 5
	d := Plan(o)
	var names []string
	for _, c := range d.Children {
		names = append(names, c.Name)
	}
	if len(names) != 2 || !slices.Contains(names, pod.Name) {
		t.Fatalf("after a spec change: children %v, want the old archiver %s and a new one", names, pod.Name)
	}
	newer := runningArchiver(t, o, now.Add(time.Minute))
	o.Pods[newer.Name] = newer
	d = Plan(o)
	if len(d.Children) != 1 || d.Children[0].Name != newer.Name {
		t.Errorf("with the new archiver ready: children %v, want %s alone", d.Children, newer.Name)
	}
}

// TestStatusRefresh: the newest delta and the RPO change the status at
// most every statusRefresh while BackupReady holds, so that an archiving
// backup does not sync itself in a loop.
func TestStatusRefresh(t *testing.T) {
	now := t0.Add(time.Hour)
	o := observe(continuousBackup(2), now)
	archiver := runningArchiver(t, o, now.Add(-time.Hour))
	o.Pods[archiver.Name] = archiver
	o.Archive = map[string]ArchiveObservation{archiver.Name: {Status: archiveStatus(now, nil)}}
	first := Plan(o).Status
	// 10 s on, 20 revisions more: the status written stays as it was.
	o.Backup.Status = first
	o.Now = now.Add(10 * time.Second)
	o.Archive[archiver.Name] = ArchiveObservation{Status: archiveStatus(o.Now, func(s *report.ArchiveStatus) { s.LastDeltaRevision = 5020 })}
	second := Plan(o).Status
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("10 s later, the status changed (-first +second):\n%s", diff)
	}
	// The store out of reach: no delta stored for minutes, the RPO growing
	// every second, BackupReady False. Once that is written, a sync 10 s
	// later writes nothing new.
	behind := func(now time.Time) *report.ArchiveStatus {
		return archiveStatus(now, func(s *report.ArchiveStatus) {
			old, last := now.Add(-3*time.Minute), t0.Add(50*time.Minute)
			s.OldestUnstored, s.LastDeltaTime, s.LastError = &old, &last, "upload: connection refused"
		})
	}
	o.Now = now.Add(20 * time.Second)
	o.Archive[archiver.Name] = ArchiveObservation{Status: behind(o.Now)}
	o.Backup.Status = Plan(o).Status
	if c := condition(o.Backup.Status, ConditionBackupReady); c != "False/"+ReasonDeltasBehind {
		t.Fatalf("the store out of reach: BackupReady %s", c)
	}
	outage := o.Backup.Status
	o.Now = now.Add(30 * time.Second)
	o.Archive[archiver.Name] = ArchiveObservation{Status: behind(o.Now)}
	if diff := cmp.Diff(outage, Plan(o).Status); diff != "" {
		t.Errorf("10 s into an outage, the status changed, which syncs the backup again (-before +after):\n%s", diff)
	}
	o.Backup.Status = first
	// 40 s on: refreshed.
	o.Now = now.Add(40 * time.Second)
	o.Archive[archiver.Name] = ArchiveObservation{Status: archiveStatus(o.Now, func(s *report.ArchiveStatus) { s.LastDeltaRevision = 5080 })}
	if got := Plan(o).Status.LastDeltaRevision; got != 5080 {
		t.Errorf("40 s later, lastDeltaRevision %d, want 5080", got)
	}
}
