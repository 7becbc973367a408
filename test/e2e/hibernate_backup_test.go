package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

const (
	sleepBackup = "before-sleep"
	// sleepPath is the one-shot's own object, which the final backups
	// must leave as it is.
	sleepPath = "hibernate/demo.db"
)

// TestHibernateThroughFinalBackup: a cluster of 3 on emptyDir, under a
// writer, hibernates through a final backup taken by an EtcdBackup of the
// CoreOS one-shot shape, in a real S3 server.
//
//   - With the store refusing the EtcdBackup's credentials, the final
//     backup fails: every member runs on, writes are refused behind the
//     fence, and the condition names the store. spec.hibernated: false
//     lifts the fence, and writes are taken again.
//   - With the credentials mended, hibernating again fences writes, takes
//     and verifies the final backup, and only then stops every member.
//   - Woken, the cluster is restored from that backup, the fence the
//     backup holds is lifted, and every acknowledged write is there. The
//     one-shot's own object is untouched throughout.
func TestHibernateThroughFinalBackup(t *testing.T) {
	// The cluster's customize hook relates its EtcdBackups, whose status
	// reports the final backup; the backups' relates the cluster, whose
	// status asks for it.
	s := newFaultScenario(t, harness.Options{Backups: true, ClusterCustomize: true})
	b := newBackupScenario(s)
	s.createSpec("hibernate-backup: create, size 3, on emptyDir", map[string]any{"size": 3, "version": faultVersion})
	if t.Failed() {
		return
	}
	b.createBackup(sleepBackup, b.s3Spec(sleepPath, "aws"), nil)
	first := b.waitBackup(sleepBackup, 2*time.Minute, "the one-shot backup", func(st BackupStatus) bool { return st.Succeeded && st.LastBackup != nil })
	oneShot := b.objectSHA256(sleepPath)
	s.startFaultWriter("hibernate-backup")
	s.waitWrites(writesAround)

	// 1. The store refuses: the members run on, fenced, until woken.
	b.createSecret("aws", s3test.AccessKey, "not-the-secret")
	hibernate := map[string]any{"hibernated": true, "hibernation": map[string]any{"backup": sleepBackup}}
	start := time.Now()
	s.mergeSpec(hibernate)
	st := s.waitParent(3*time.Minute, "the final backup fails, Degraded naming the store", func(st ParentStatus) bool {
		deg, reason := st.Condition("Degraded")
		return deg == "True" && reason == "FinalBackupFailed"
	})
	if t.Failed() {
		return
	}
	t.Logf("the final backup failed in %s: %s", time.Since(start).Round(time.Second), st.ConditionMessage("Degraded"))
	if msg := st.ConditionMessage("Degraded"); !strings.Contains(msg, "s3://"+backupBucket+"/"+sleepPath) {
		t.Errorf("Degraded says %q: it must name the store", msg)
	}
	if n := len(s.c.Pods()); n != 3 {
		t.Errorf("the final backup failed, and %d member Pods are left, want the 3", n)
	}
	s.checkFenced("the final backup failed", true)
	s.mergeSpec(map[string]any{"hibernated": false})
	s.waitParent(2*time.Minute, "woken before the members went: Ready, the fence lifted", func(st ParentStatus) bool {
		ready, _ := st.Condition("Ready")
		return ready == "True" && st.Hibernation == nil
	})
	if t.Failed() {
		return
	}
	s.checkFenced("woken before the members went", false)

	// 2. The store takes it: fenced, backed up, verified, then stopped.
	s.waitWrites(s.w.Acked() + writesAround)
	b.createSecret("aws", s3test.AccessKey, s3test.SecretKey)
	start = time.Now()
	s.mergeSpec(map[string]any{"hibernated": true})
	st = s.waitParent(4*time.Minute, "hibernated: phase Hibernated, no member Pod, the final backup recorded", func(st ParentStatus) bool {
		ready, _ := st.Condition("Ready")
		return st.Phase == "Hibernated" && ready == "True" && len(s.c.Pods()) == 0
	})
	if t.Failed() {
		return
	}
	h := st.Hibernation
	if h == nil || h.Source == nil || h.Source.S3 == nil || h.Revision < h.FencedRevision || h.FencedRevision == 0 {
		t.Fatalf("hibernated: status.hibernation %+v; want a final backup in S3 at the fenced revision or later", h)
	}
	final := strings.TrimPrefix(h.Source.S3.Path, backupBucket+"/")
	t.Logf("hibernated in %s: writes fenced at revision %d, final backup %s at revision %d", time.Since(start).Round(time.Second), h.FencedRevision, final, h.Revision)
	if final == sleepPath || !strings.HasPrefix(final, sleepPath) {
		t.Errorf("the final backup is stored at %s: want a name of its own beside the one-shot's %s", final, sleepPath)
	}
	if got := b.objectSHA256(final); got != h.Source.SHA256 {
		t.Errorf("the final backup's object has sha256 %s, the status says %s", got, h.Source.SHA256)
	}
	if acked := s.w.HighestRevision(); acked > h.FencedRevision {
		t.Errorf("a put was acknowledged at revision %d, after the fence at %d", acked, h.FencedRevision)
	}
	s.holdHibernated()

	// 3. Woken: restored from the final backup, the fence lifted.
	start = time.Now()
	s.mergeSpec(map[string]any{"hibernated": false})
	s.waitParent(4*time.Minute, "woken: restored, Ready with 3 members, the record gone", func(st ParentStatus) bool {
		ready, _ := st.Condition("Ready")
		return ready == "True" && st.Phase == "Running" && st.ReadyMembers == 3 && st.Hibernation == nil
	})
	if t.Failed() {
		return
	}
	t.Logf("woken in %s", time.Since(start).Round(time.Second))
	s.checkFenced("woken from the final backup", false)
	s.waitWrites(s.w.Acked() + writesAround)
	// Restored as it was: the revisions go on from the fence, so that a
	// watcher resumes across the hibernation (the history check below
	// replays it), where a restore of an older backup lifts them.
	if got := s.w.HighestRevision(); got <= h.FencedRevision || got > h.FencedRevision+100_000 {
		t.Errorf("woken: writes acknowledged up to revision %d; want them to go on from the fenced revision %d", got, h.FencedRevision)
	}
	s.verifyWrites("hibernated through a final backup and woken")
	if got := b.objectSHA256(sleepPath); got != oneShot || first.LastBackup.SHA256 != oneShot {
		t.Errorf("the one-shot's object changed: sha256 %s, was %s (status %s)", got, oneShot, first.LastBackup.SHA256)
	}
}

// checkFenced checks that a put through the client Service is refused
// behind the fence, with etcd's own error, or taken without it.
func (s *scenario) checkFenced(step string, want bool) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.env.Ctx(), 20*time.Second)
	defer cancel()
	var err error
	// A member may still be starting: the answer that counts is etcd's.
	for ctx.Err() == nil {
		err = PutVia(ctx, []string{s.c.ServiceURL()}, "/fence/"+strings.ReplaceAll(step, " ", "-"), step, 3*time.Second)
		if err == nil || strings.Contains(err.Error(), "corrupt") {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	switch {
	case want && err == nil:
		s.t.Errorf("%s: a put was taken behind the fence", step)
	case want && !strings.Contains(err.Error(), "corrupt"):
		s.t.Errorf("%s: a put failed with %v; want etcd's refusal behind the fence (corrupt cluster)", step, err)
	case !want && err != nil:
		s.t.Errorf("%s: a put failed with %v; want it taken, the fence lifted", step, err)
	}
}
