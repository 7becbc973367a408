package etcdcluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

const finalBackupName = "before-sleep"

// fenceError is the fence as a member lists it among its Status errors.
var fenceError = fmt.Sprintf("memberID:%d alarm:CORRUPT ", membership.FenceMemberID)

// hibernatingOnEmptyDir is a running cluster of 3 on emptyDir, led by its
// first member, asked to hibernate through the EtcdBackup finalBackupName.
func hibernatingOnEmptyDir() *Observed {
	o := rolloutCluster(false, true, true, true)
	o.Cluster.Spec.Hibernated = true
	o.Cluster.Spec.Hibernation = &v1beta2.HibernationPolicy{Backup: finalBackupName}
	o.Backups = map[string]*v1beta2.EtcdBackup{finalBackupName: {
		ObjectMeta: metav1.ObjectMeta{Name: finalBackupName, Namespace: testNS},
		Spec: v1beta2.BackupSpec{ClusterName: testCluster, StorageType: v1beta2.BackupStorageS3,
			S3: &v1beta2.S3BackupSource{Path: "bucket/demo.db", AWSSecret: "aws", Endpoint: "http://s3.local:7070"}},
	}}
	for i := range o.Membership.Members {
		o.Membership.Members[i].Revision = 42
	}
	return o
}

// fenced makes every member report the hook's fence.
func fenced(o *Observed) *Observed {
	for i := range o.Membership.Members {
		o.Membership.Members[i].Errors = append(o.Membership.Members[i].Errors, fenceError)
	}
	return o
}

// finalRun records a finished run of the EtcdBackup for request.
func finalRun(o *Observed, request string, succeeded bool, revision int64) {
	b := o.Backups[finalBackupName]
	end := metav1.NewTime(testNow)
	b.Status.LastRun = &v1beta2.BackupRun{Name: finalBackupName + "-3", Request: request, End: &end, Succeeded: succeeded}
	if !succeeded {
		b.Status.LastRun.Reason = "Access Denied"
		return
	}
	b.Status.LastBackup = &v1beta2.StoredBackup{Location: fmt.Sprintf("s3://bucket/demo.db_v%d_20261128", revision), Revision: revision, SHA256: "ab12", Time: end}
}

// TestHibernateThroughFinalBackup walks a cluster on emptyDir through a
// hibernation, one sync at a time, each on the status the previous one
// wrote: no member Pod goes before a verified final backup that holds
// every write is in the status, and writes are fenced off before the
// backup is asked for.
func TestHibernateThroughFinalBackup(t *testing.T) {
	o := hibernatingOnEmptyDir()
	request := v1beta2.HibernationRequest(testCluster, o.Cluster.Generation, 42)
	steps := []struct {
		name, reason string
		change       func(o *Observed)
		action       membership.ActionType
		progressing  string
		degraded     string
		stopped      int
		record       *v1beta2.HibernationStatus
	}{
		{
			name: "fence", reason: "writes are fenced off first, through the leader, and nothing else moves",
			change: func(o *Observed) {}, action: membership.ActionRaiseFence, progressing: ReasonFencing, degraded: ReasonAsExpected,
			record: &v1beta2.HibernationStatus{Backup: finalBackupName},
		},
		{
			name: "fence raised, not seen yet", reason: "the step made is reported, and not made twice in a sync",
			change: func(o *Observed) {
				o.Acted = &Outcome{Action: membership.Action{Type: membership.ActionRaiseFence}}
			},
			progressing: ReasonFencing, degraded: ReasonAsExpected,
			record: &v1beta2.HibernationStatus{Backup: finalBackupName},
		},
		{
			name: "fenced: ask for the backup", reason: "the members report the fence: the request goes out with the fenced revision; the fence is no corruption",
			change:      func(o *Observed) { o.Acted = nil; fenced(o) },
			progressing: ReasonFinalBackup, degraded: ReasonAsExpected,
			record: &v1beta2.HibernationStatus{Backup: finalBackupName, Request: request, FencedRevision: 42},
		},
		{
			name: "the backup failed", reason: "every member runs on behind the fence, and the condition names the store",
			change:      func(o *Observed) { finalRun(o, request, false, 0) },
			progressing: ReasonFinalBackupFailed, degraded: ReasonFinalBackupFailed,
			record: &v1beta2.HibernationStatus{Backup: finalBackupName, Request: request, FencedRevision: 42},
		},
		{
			name: "a backup older than the fence", reason: "it may miss acknowledged writes: not taken",
			change:      func(o *Observed) { finalRun(o, request, true, 41) },
			progressing: ReasonFinalBackupFailed, degraded: ReasonFinalBackupFailed,
			record: &v1beta2.HibernationStatus{Backup: finalBackupName, Request: request, FencedRevision: 42},
		},
		{
			name: "verified", reason: "the source is recorded; no Pod goes before the status holds it",
			change:      func(o *Observed) { finalRun(o, request, true, 42) },
			progressing: ReasonFinalBackup, degraded: ReasonAsExpected,
			record: &v1beta2.HibernationStatus{Backup: finalBackupName, Request: request, FencedRevision: 42, Revision: 42, Time: &metav1.Time{Time: testNow},
				Source: &v1beta2.ResolvedSource{SHA256: "ab12", S3: &v1beta2.S3BackupSource{Path: "bucket/demo.db_v42_20261128", AWSSecret: "aws", Endpoint: "http://s3.local:7070"}}},
		},
		{
			name: "recorded: the members stop", reason: "the newest follower first, as on claims",
			change:      func(o *Observed) {},
			progressing: ReasonHibernating, degraded: ReasonAsExpected, stopped: 1,
			record: &v1beta2.HibernationStatus{Backup: finalBackupName, Request: request, FencedRevision: 42, Revision: 42, Time: &metav1.Time{Time: testNow},
				Source: &v1beta2.ResolvedSource{SHA256: "ab12", S3: &v1beta2.S3BackupSource{Path: "bucket/demo.db_v42_20261128", AWSSecret: "aws", Endpoint: "http://s3.local:7070"}}},
		},
	}
	for _, s := range steps {
		s.change(o)
		d := Plan(o)
		var got membership.ActionType
		if d.Action != nil {
			got = d.Action.Type
		}
		if got != s.action {
			t.Errorf("%s: %s: action %q (%v), want %q", s.name, s.reason, got, d.Action, s.action)
		}
		if got == membership.ActionRaiseFence && d.Action.LeaderEndpoint != testAddresses.ClientURL(name(0)) {
			t.Errorf("%s: the fence goes to %q, want the leader's %q", s.name, d.Action.LeaderEndpoint, testAddresses.ClientURL(name(0)))
		}
		prog, deg := conditionOf(d.Status, v1beta2.ConditionProgressing), conditionOf(d.Status, v1beta2.ConditionDegraded)
		if prog.Reason != s.progressing || deg.Reason != s.degraded {
			t.Errorf("%s: %s: Progressing %s, Degraded %s (%s); want %s, %s", s.name, s.reason, prog.Reason, deg.Reason, deg.Message, s.progressing, s.degraded)
		}
		if s.degraded == ReasonFinalBackupFailed && !strings.Contains(deg.Message, "s3://bucket/demo.db") && !strings.Contains(deg.Message, "revision 41") {
			t.Errorf("%s: Degraded says %q: it must name the store or the revision", s.name, deg.Message)
		}
		if n := len(stoppedPods(o, d)); n != s.stopped {
			t.Errorf("%s: %s: %d member Pods stopped, want %d", s.name, s.reason, n, s.stopped)
		}
		if diff := cmp.Diff(s.record, d.Status.Hibernation); diff != "" {
			t.Errorf("%s: %s: status.hibernation (-want +got):\n%s", s.name, s.reason, diff)
		}
		o.Cluster.Status = d.Status
	}

	// Every member gone: hibernated, Current for kstatus, the backup named.
	o.Pods, o.Membership, o.MembershipError = map[string]*corev1.Pod{}, nil, "no member Pod to ask"
	d := Plan(o)
	if ready := conditionOf(d.Status, v1beta2.ConditionReady); d.Status.Phase != v1beta2.PhaseHibernated || ready.Status != metav1.ConditionTrue ||
		!strings.Contains(d.Status.Reason, "s3://bucket/demo.db_v42_20261128") {
		t.Errorf("hibernated: phase %s, Ready %s, reason %q; want Hibernated, True, naming the final backup", d.Status.Phase, ready.Status, d.Status.Reason)
	}
	if d.Status.Hibernation == nil || d.Status.Hibernation.Source == nil {
		t.Fatalf("hibernated: the record of the final backup is gone: %+v", d.Status.Hibernation)
	}
	o.Cluster.Status = d.Status
	// The spec no longer naming the backup changes nothing: the data is
	// in the one recorded.
	pol := o.Cluster.Spec.Hibernation
	o.Cluster.Spec.Hibernation = nil
	if d := Plan(o); d.Status.Phase != v1beta2.PhaseHibernated || conditionOf(d.Status, v1beta2.ConditionDegraded).Status != metav1.ConditionFalse ||
		d.Status.Hibernation == nil || d.Status.Hibernation.Source == nil {
		t.Errorf("hibernated, spec.hibernation removed: phase %s, Degraded %s (%s), record %+v; want it hibernated on its recorded backup",
			d.Status.Phase, conditionOf(d.Status, v1beta2.ConditionDegraded).Reason, d.Status.Reason, d.Status.Hibernation)
	}
	o.Cluster.Spec.Hibernation = pol

	// Woken: the final backup is restored, exactly the object verified.
	o.Cluster.Spec.Hibernated = false
	d = Plan(o)
	if rs := d.Status.Restore; rs == nil || rs.Request != hibernationRestorePrefix+request {
		t.Fatalf("woken: status.restore %+v, want the request %s", rs, hibernationRestorePrefix+request)
	}
	pods := podsIn(d.Children)
	if len(pods) != 1 {
		t.Fatalf("woken: Pods %v, want the restore's seed alone", pods)
	}
	fetch := strings.Join(renderedPod(d.Children, pods[0]).Spec.InitContainers[0].Args, " ")
	for _, want := range []string{"--s3-path=bucket/demo.db_v42_20261128", "--sha256=ab12", "--s3-endpoint=http://s3.local:7070"} {
		if !strings.Contains(fetch, want) {
			t.Errorf("woken: the seed's fetch %q lacks %s", fetch, want)
		}
	}
	apply := strings.Join(renderedPod(d.Children, pods[0]).Spec.InitContainers[1].Command, " ")
	if strings.Contains(apply, "--bump-revision") || strings.Contains(apply, "--mark-compacted") {
		t.Errorf("woken: the restore %q lifts the revision: the final backup holds the last revision handed out, so watchers resume across it", apply)
	}
	if d.Status.Hibernation == nil {
		t.Error("woken: the record went before the restore it drives")
	}
}

// TestFinalBackupRefused: what keeps a final backup from being taken is
// said before anything is fenced, and nothing changes.
func TestFinalBackupRefused(t *testing.T) {
	tests := []struct {
		name, reason, want string
		change             func(o *Observed)
	}{
		{"no spec.hibernation", "without a backup to take, the data would go with the Pods", "spec.hibernation.backup", func(o *Observed) { o.Cluster.Spec.Hibernation = nil }},
		{"no such EtcdBackup", "a missing object is named", `no EtcdBackup "before-sleep"`, func(o *Observed) { delete(o.Backups, finalBackupName) }},
		{"another cluster's", "a snapshot of another cluster would wake as this one", "its spec.clusterName must be", func(o *Observed) { o.Backups[finalBackupName].Spec.ClusterName = "other" }},
		{"continuous", "a final backup is a snapshot", "continuous", func(o *Observed) {
			o.Backups[finalBackupName].Spec.BackupPolicy = &v1beta2.BackupPolicy{DeltaIntervalInSecond: 5}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := hibernatingOnEmptyDir()
			tt.change(o)
			d := Plan(o)
			if d.Action != nil || len(stoppedPods(o, d)) != 0 {
				t.Errorf("%s: action %v, Pods stopped %v; want nothing changed", tt.reason, d.Action, stoppedPods(o, d))
			}
			if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Reason != ReasonHibernationRefused || !strings.Contains(deg.Message, tt.want) {
				t.Errorf("%s: Degraded %s: %s; want %s saying %q", tt.reason, deg.Reason, deg.Message, ReasonHibernationRefused, tt.want)
			}
		})
	}
}

// TestFenceLiftedWhenNotHibernating: a cluster that is not hibernating
// and holds the hook's fence (woken from a final backup, which holds it
// too, or woken before its members went) has it lifted as its first step,
// and reports it until then as its own, never as corruption.
func TestFenceLiftedWhenNotHibernating(t *testing.T) {
	o := fenced(hibernatingOnEmptyDir())
	o.Cluster.Spec.Hibernated = false
	o.Cluster.Status.Hibernation = &v1beta2.HibernationStatus{Backup: finalBackupName, Request: "demo/1@42", FencedRevision: 42}
	d := Plan(o)
	if d.Action == nil || d.Action.Type != membership.ActionLiftFence || d.Action.LeaderEndpoint != testAddresses.ClientURL(name(0)) {
		t.Fatalf("action %v, want the fence lifted through the leader", d.Action)
	}
	if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Reason != ReasonWritesFenced {
		t.Errorf("Degraded %s (%s), want %s: the fence is the hook's, not corruption", deg.Reason, deg.Message, ReasonWritesFenced)
	}
	if stalled := conditionOf(d.Status, v1beta2.ConditionStalled); stalled.Status != metav1.ConditionFalse {
		t.Errorf("Stalled %s (%s): the hook lifts its own fence", stalled.Status, stalled.Message)
	}
	if d.Status.Hibernation == nil {
		t.Error("the record went while the fence stands")
	}
	if got := len(podsIn(d.Children)); got != 3 {
		t.Errorf("%d member Pods, want the 3 that run: woken before they went, nothing is restored", got)
	}
	checkForgottenOnceLifted(t, o, d, "woken before the members went")
}

// checkForgottenOnceLifted: once the members no longer report the fence,
// the next sync, on the status d wrote, drops the record and makes no step.
func checkForgottenOnceLifted(t *testing.T, o *Observed, d Decision, what string) {
	t.Helper()
	for i := range o.Membership.Members {
		o.Membership.Members[i].Errors = nil
	}
	o.Cluster.Status = d.Status
	if d := Plan(o); d.Status.Hibernation != nil || d.Action != nil {
		t.Errorf("%s, fence lifted: status.hibernation %+v, action %v; want neither", what, d.Status.Hibernation, d.Action)
	}
}

// TestEtcdCorruptionIsNotTheFence: a CORRUPT alarm etcd raised itself
// stays a person's to look at, beside the fence or not.
func TestEtcdCorruptionIsNotTheFence(t *testing.T) {
	o := fenced(hibernatingOnEmptyDir())
	o.Cluster.Spec.Hibernated = false
	o.Membership.Members[1].Errors = append(o.Membership.Members[1].Errors, "memberID:2 alarm:CORRUPT ")
	d := Plan(o)
	if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Reason != ReasonCorrupt {
		t.Errorf("Degraded %s (%s), want %s", deg.Reason, deg.Message, ReasonCorrupt)
	}
	if stalled := conditionOf(d.Status, v1beta2.ConditionStalled); stalled.Reason != ReasonCorrupt {
		t.Errorf("Stalled %s, want %s", stalled.Reason, ReasonCorrupt)
	}
}

// TestWokenFromFinalBackup: once the restore of the final backup is
// committed, its members hold the data: the fence the backup carried is
// lifted, the record goes, and nothing is restored again.
func TestWokenFromFinalBackup(t *testing.T) {
	o := fenced(hibernatingOnEmptyDir())
	o.Cluster.Spec.Hibernated = false
	id := hibernationRestorePrefix + "demo/1@42"
	o.Cluster.Status.Hibernation = &v1beta2.HibernationStatus{Backup: finalBackupName, Request: "demo/1@42", FencedRevision: 42, Revision: 42,
		Source: &v1beta2.ResolvedSource{S3: &v1beta2.S3BackupSource{Path: "bucket/demo.db_v42", AWSSecret: "aws"}}}
	o.Cluster.Status.Bootstrap = &v1beta2.BootstrapStatus{SeedMember: name(0), Bootstrapped: true,
		Restore: &v1beta2.RestoreRecord{Request: id}}
	for _, pod := range o.Pods {
		pod.Annotations[AnnotationRestoreRequest], pod.Annotations[AnnotationSeedMember] = id, name(0)
	}
	d := Plan(o)
	if d.Action == nil || d.Action.Type != membership.ActionLiftFence {
		t.Fatalf("restored behind the fence the backup holds: action %v, want the fence lifted", d.Action)
	}
	if got := podsIn(d.Children); len(got) != 3 {
		t.Errorf("member Pods %v, want the 3 restored members and no new seed: the committed restore is not made again", got)
	}
	checkForgottenOnceLifted(t, o, d, "restored")
}

// TestFenceLiftedByHandAsksAgain: a fence lifted by hand after the final
// backup was asked for lets writes in, so the request is dropped and the
// fence raised again; fenced anew at a later revision, the hook asks for a
// new backup, which the run of the old request does not answer.
func TestFenceLiftedByHandAsksAgain(t *testing.T) {
	o := fenced(hibernatingOnEmptyDir())
	old := v1beta2.HibernationRequest(testCluster, o.Cluster.Generation, 42)
	o.Cluster.Status.Hibernation = &v1beta2.HibernationStatus{Backup: finalBackupName, Request: old, FencedRevision: 42}
	for i := range o.Membership.Members {
		o.Membership.Members[i].Errors = nil
		o.Membership.Members[i].Revision = 50
	}
	d := Plan(o)
	if d.Action == nil || d.Action.Type != membership.ActionRaiseFence {
		t.Fatalf("the fence is gone: action %v, want it raised again", d.Action)
	}
	if h := d.Status.Hibernation; h == nil || h.Request != "" || h.FencedRevision != 0 {
		t.Errorf("the fence is gone: status.hibernation %+v; want the old request dropped", h)
	}
	o.Cluster.Status = d.Status
	fenced(o)
	finalRun(o, old, true, 42)
	d = Plan(o)
	want := v1beta2.HibernationRequest(testCluster, o.Cluster.Generation, 50)
	if h := d.Status.Hibernation; h == nil || h.Request != want || h.FencedRevision != 50 || h.Source != nil {
		t.Errorf("fenced again at revision 50: status.hibernation %+v; want the request %s, and the old run's backup not taken", h, want)
	}
}
