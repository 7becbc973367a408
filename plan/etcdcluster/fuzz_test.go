package etcdcluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// fuzzBytes hands out a fuzz input one byte at a time, then zeros, so
// that every prefix of an input is a valid scenario.
func fuzzBytes(data []byte) func() byte {
	return func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
}

// scenario turns fuzz bytes into an observation: each byte decides one
// more thing about the cluster, so every prefix is a valid scenario.
func scenario(data []byte) *Observed {
	next := fuzzBytes(data)
	size := int(next()%9) - 1 // -1 .. 7, including invalid sizes
	c := newCluster(size, []string{"3.6.16", "3.5.35", "3.3.25", "3.2.13"}[next()%4])
	if size < 1 {
		c.Spec.Size = size
	}
	o := observed(c)
	if size < 1 {
		o.SpecErrors = field.ErrorList{field.Invalid(field.NewPath("spec", "size"), size, "out of range")}
	}
	flags := next()
	c.Spec.Paused = flags&1 != 0
	c.Spec.Hibernated = flags&16 != 0
	if flags&2 != 0 {
		c.Status.Phase = "Running"
		c.Status.Size = 3
	}
	nMembers := int(next() % 8)
	if flags&4 != 0 {
		o.Membership = &membership.Membership{Stale: flags&8 != 0}
	}
	for i := range nMembers {
		bits := next()
		n := name(i)
		m := member(uint64(i+1), n)
		if bits&1 != 0 {
			m.IsLearner = true
			m.RaftIndex = uint64(next())
		}
		if bits&2 != 0 {
			m.Name = "" // added, not started
		}
		if bits&4 != 0 {
			m = down(m)
		}
		if o.Membership != nil && bits&8 == 0 {
			o.Membership.Members = append(o.Membership.Members, m)
		}
		switch (bits >> 4) % 4 {
		case 0: // no Pod
		case 1:
			o.Pods[n] = readyPod(n)
		case 2:
			o.Pods[n] = memberPod(n, corev1.PodPending, false)
		case 3:
			o.Pods[n] = memberPod(n, corev1.PodFailed, false)
		}
	}
	if o.Membership != nil && len(o.Membership.Members) > 0 {
		o.Membership.LeaderID = o.Membership.Members[int(next())%len(o.Membership.Members)].ID
	}
	// What the request says of the cluster's past: the bootstrap record,
	// the recreate-empty annotation, claims.
	past := next()
	seed := SeedName(c.Name, string(c.UID))
	if past&1 != 0 {
		c.Status.Bootstrap = &v1beta2.BootstrapStatus{SeedMember: seed, Bootstrapped: past&2 != 0}
	}
	if past&4 != 0 {
		c.Annotations = map[string]string{v1beta2.AnnotationRecreateEmpty: seed}
	}
	if past&8 != 0 {
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: seed, Namespace: testNS}}
		if past&16 != 0 {
			claim.DeletionTimestamp = &metav1.Time{Time: testNow}
		}
		o.PVCs[seed] = claim
	}
	// A restore request: an EtcdRestore, its seed's fetch so far, and
	// whether an earlier attempt failed.
	rq := next()
	if rq&1 != 0 {
		etcdRestore()(o)
		switch (rq >> 1) % 4 {
		case 1:
			fetchEnded(1, `{"reason":"unreachable"}`)(o)
		case 2:
			fetchEnded(report.ExitBackupUnusable, `{"reason":"sha256 mismatch"}`)(o)
		case 3:
			fetchEnded(0, `{"revision":42}`)(o)
		}
		if rq&8 != 0 {
			c.Status.Restore = &v1beta2.ClusterRestoreStatus{Request: restoreID, Phase: v1beta2.RestoreFailed}
		}
	}
	// A change of spec being rolled out: the spec asks for specAfter, each
	// Pod was rendered from one spec or the other, and members may keep
	// their data on claims.
	roll, outdated := next(), next()
	if roll&1 != 0 {
		policy := specAfter
		c.Spec.Pod = &policy
		before := v1beta2.ClusterSpec{Version: c.Spec.Version, Pod: &specBefore}
		for i := range nMembers {
			pod := o.Pods[name(i)]
			if pod == nil {
				continue
			}
			spec := c.Spec
			if outdated&(1<<i) != 0 {
				spec = before
			}
			onSpec(pod, spec)
			if roll&2 != 0 {
				pod.Spec.Volumes = []corev1.Volume{{Name: dataVolume, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name(i)},
				}}}
				o.PVCs[name(i)] = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: testNS}}
			}
		}
	}
	// Who serves clients: the client Service of this release or of an
	// earlier one, and which Pods carry LabelServing already.
	svc, serving := next(), next()
	if svc&1 != 0 {
		o.Services[plan.ClientServiceName(c.Name)] = clientService(c, svc&2 != 0)
	}
	for i := range nMembers {
		if pod := o.Pods[name(i)]; pod != nil && serving&(1<<i) != 0 {
			labelled(pod)
		}
	}
	hibernationStage(o, next())
	return o
}

// hibernationStage sets where a hibernation through a final backup
// stands: spec.hibernation, the fence reported, the EtcdBackup's final
// run, and the backup recorded in status.
func hibernationStage(o *Observed, hib byte) {
	c := o.Cluster
	if hib&1 == 0 {
		return
	}
	c.Spec.Hibernation = &v1beta2.HibernationPolicy{Backup: finalBackupName}
	b := &v1beta2.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: finalBackupName, Namespace: testNS},
		Spec: v1beta2.BackupSpec{ClusterName: c.Name, StorageType: v1beta2.BackupStorageS3, S3: &v1beta2.S3BackupSource{Path: "bucket/demo.db", AWSSecret: "aws"}}}
	o.Backups = map[string]*v1beta2.EtcdBackup{finalBackupName: b}
	if hib&2 != 0 && o.Membership != nil {
		for i := range o.Membership.Members {
			o.Membership.Members[i].Errors = append(o.Membership.Members[i].Errors, fenceError)
			o.Membership.Members[i].Revision = 7
		}
	}
	request := v1beta2.HibernationRequest(c.Name, c.Generation, 7)
	if hib&4 != 0 {
		end := metav1.NewTime(testNow)
		b.Status.LastRun = &v1beta2.BackupRun{Name: "b-1", Request: request, End: &end, Succeeded: hib&8 != 0}
		b.Status.LastBackup = &v1beta2.StoredBackup{Location: "s3://bucket/demo.db_v7", Revision: int64(hib >> 5), Time: end}
	}
	if hib&16 != 0 {
		c.Status.Hibernation = &v1beta2.HibernationStatus{Backup: finalBackupName, Request: request,
			Source: &v1beta2.ResolvedSource{S3: &v1beta2.S3BackupSource{Path: "bucket/demo.db_v7", AWSSecret: "aws"}}}
	}
}

// restoreVerified: the observation holds a restore seed whose fetch
// succeeded, which lets the plan drop the old cluster.
func restoreVerified(o *Observed) bool {
	failed := o.Cluster.Status.Restore != nil && o.Cluster.Status.Restore.Phase == v1beta2.RestoreFailed
	return o.RestoreRequest != nil && !failed && observeFetch(o.Pods[restoreSeed]).verified
}

// startsNewCluster names the Pods of the answer that are not observed yet
// and would bootstrap a cluster of their own.
func startsNewCluster(o *Observed, d Decision) []string {
	var out []string
	for _, c := range d.Children {
		pod, ok := c.Object.(*corev1.Pod)
		if _, exists := o.Pods[c.Name]; !ok || exists {
			continue
		}
		// A restore's seed starts a cluster of its own, on the snapshot's
		// data: its init containers restore it first.
		if slices.Contains(pod.Spec.Containers[0].Command, "--initial-cluster-state=new") && len(pod.Spec.InitContainers) == 0 {
			out = append(out, c.Name)
		}
	}
	return out
}

// FuzzPlan checks the planner's safety invariants on arbitrary clusters.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{4, 0, 6, 3, 0x10, 0x10, 0x10})
	f.Add([]byte{6, 1, 6, 3, 0x10, 0x10, 0x14, 1})
	f.Add([]byte{2, 0, 6, 3, 0x10, 0x11, 50, 0})
	f.Add([]byte{0, 0, 6, 3, 0x10, 0x10, 0x10})
	f.Add([]byte{4, 2, 14, 3, 0x10, 0x14, 0x14})
	// Every member gone from a cluster recorded as bootstrapped, with and
	// without the recreate-empty annotation, and with a claim being deleted.
	f.Add([]byte{4, 0, 0, 0, 3})
	f.Add([]byte{4, 0, 0, 0, 7})
	f.Add([]byte{4, 0, 0, 0, 27})
	// A restore over a running cluster: requested, retrying, unusable,
	// verified, failed before.
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x10, 0x10, 0, 3, 1})
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x10, 0x10, 0, 3, 3})
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x10, 0x10, 0, 3, 5})
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x10, 0x10, 0, 3, 7})
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x10, 0x10, 0, 3, 15})
	// A rollout: on claims with the first member outdated, and on
	// emptyDirs with two.
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x10, 0x10, 0, 0, 0, 3, 1})
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x10, 0x10, 0, 0, 0, 1, 6})
	f.Add([]byte{4, 2, 6, 3, 0x10, 0x20, 0x10, 0, 0, 0, 3, 5})
	// Who serves clients: a learner's Pod labelled by hand; a client
	// Service of an earlier release with no Pod labelled yet, and with
	// one.
	f.Add([]byte{5, 0, 6, 4, 0x10, 0x10, 0x10, 0x11, 50, 0, 0, 0, 0, 0, 3, 8})
	f.Add([]byte{4, 0, 6, 3, 0x10, 0x10, 0x10, 0, 0, 0, 0, 0, 1, 0})
	f.Add([]byte{4, 0, 6, 3, 0x10, 0x10, 0x10, 0, 0, 0, 0, 0, 1, 1})
	// Hibernating: a cluster of 3 on claims, and one on emptyDirs.
	f.Add([]byte{4, 0, 0x16, 3, 0x10, 0x10, 0x10, 0, 0, 0, 3, 0})
	f.Add([]byte{4, 0, 0x16, 3, 0x10, 0x10, 0x10})
	// Hibernating on emptyDirs through a final backup: asked, fenced,
	// backed up, recorded.
	f.Add([]byte{4, 0, 0x16, 3, 0x10, 0x10, 0x10, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{4, 0, 0x16, 3, 0x10, 0x10, 0x10, 0, 0, 0, 0, 0, 0, 0, 3})
	f.Add([]byte{4, 0, 0x16, 3, 0x10, 0x10, 0x10, 0, 0, 0, 0, 0, 0, 0, 0xef})
	f.Add([]byte{4, 0, 0x16, 3, 0x10, 0x10, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x1f})
	f.Fuzz(func(t *testing.T, data []byte) {
		o := scenario(data)
		before := fmt.Sprint(o.Membership)
		pods, claims := maps.Clone(o.Pods), maps.Clone(o.PVCs)
		d := Plan(o)
		if fmt.Sprint(o.Membership) != before {
			t.Fatal("Plan modified its input membership")
		}
		// The reconciler plans again on the same observation: a restore
		// takes Pods out of the planner's view, never out of the caller's.
		if !maps.Equal(o.Pods, pods) || !maps.Equal(o.PVCs, claims) {
			t.Fatalf("Plan changed the observed Pods or claims: %v and %v, were %v and %v",
				slices.Sorted(maps.Keys(o.Pods)), slices.Sorted(maps.Keys(o.PVCs)), slices.Sorted(maps.Keys(pods)), slices.Sorted(maps.Keys(claims)))
		}
		// The status must not depend on the random name drawn for a member
		// not yet added: Metacontroller syncs again on every status change.
		o.FreshSuffix = "other"
		if diff := cmp.Diff(d.Status, Plan(o).Status); diff != "" {
			t.Fatalf("status depends on the fresh member name (-first +second):\n%s", diff)
		}
		// A cluster recorded as bootstrapped is never bootstrapped again
		// unless the recreate-empty annotation names it, and the record
		// says so until then.
		verified := restoreVerified(o)
		if got := d.Status.Bootstrap; got != nil && got.SeedMember == restoreSeed && !verified {
			t.Fatalf("the record names the restore's seed before its fetch verified the snapshot: %+v", got)
		}
		if rec := o.Cluster.Status.Bootstrap; rec != nil && rec.Bootstrapped && !verified {
			recreate := o.Cluster.Annotations[v1beta2.AnnotationRecreateEmpty] == rec.SeedMember
			if pods := startsNewCluster(o, d); len(pods) > 0 && !recreate {
				t.Fatalf("a cluster recorded as bootstrapped gets new Pods with --initial-cluster-state=new: %v", pods)
			}
			if got := d.Status.Bootstrap; !recreate && (got == nil || !got.Bootstrapped || got.SeedMember != rec.SeedMember) {
				t.Fatalf("the bootstrap record %+v became %+v", rec, got)
			}
		}
		inAnswer := map[string]bool{}
		for _, c := range d.Children {
			if c.Kind == plan.KindPod {
				inAnswer[c.Name] = true
			}
		}

		// No client is sent to a learner or a member that never ran: the
		// client Service selects LabelServing, and no answer adds it to
		// such a member's Pod (see serving.go; a voter never becomes a
		// learner again, so a Pod the hook labelled stays a voter's, and
		// a frozen cluster keeps what was applied). Nor does an answer switch
		// a client Service that selects every member to LabelServing
		// before a ready Pod carries it: that would leave it no endpoint.
		frozen := len(o.SpecErrors) > 0 || o.Cluster.Spec.Paused
		if o.Membership != nil {
			for _, m := range o.Membership.Members {
				if !m.IsLearner && m.Started() {
					continue
				}
				n := membership.MemberName(m, o.Cluster.Name)
				if was := o.Pods[n]; was != nil && was.Labels[LabelServing] != "" {
					continue
				}
				for _, c := range d.Children {
					if pod, ok := podObject(c); ok && c.Kind == plan.KindPod && c.Name == n && pod.Labels[LabelServing] != "" {
						t.Fatalf("member %s (learner %v, started %v) gets %s", n, m.IsLearner, m.Started(), LabelServing)
					}
				}
			}
		}
		if svc := o.Services[plan.ClientServiceName(o.Cluster.Name)]; svc != nil && svc.Spec.Selector[LabelServing] == "" {
			labelled := false
			for _, pod := range o.Pods {
				labelled = labelled || (pod.Labels[LabelServing] == "true" && podReady(pod))
			}
			for _, c := range d.Children {
				if out, ok := c.Object.(*corev1.Service); ok && c.Name == svc.Name && out.Spec.Selector[LabelServing] != "" && !labelled {
					t.Fatalf("the client Service selects %s before any ready Pod carries it", LabelServing)
				}
			}
		}

		// Hibernating stops member Pods on claims, and never leaves fewer
		// running than a quorum while any runs; on emptyDir it stops none.
		// It changes no membership.
		// On emptyDir, only once the status the request carries holds a
		// final backup; the one step it may make is the fence.
		if d.Action != nil && d.Action.Type == membership.ActionRaiseFence && !o.Cluster.Spec.Hibernated {
			t.Fatalf("the fence raised on a cluster not hibernating")
		}
		recorded := o.Cluster.Status.Hibernation != nil && o.Cluster.Status.Hibernation.Source != nil
		if o.Cluster.Spec.Hibernated && !frozen {
			if d.Action != nil && (d.Action.Type != membership.ActionRaiseFence || o.Cluster.Spec.Persistent() || recorded) {
				t.Fatalf("action %s while hibernating", d.Action)
			}
			running, members := 0, len(o.Pods)
			if o.Membership != nil {
				members = max(members, len(o.Membership.Voters()))
			}
			for name, pod := range o.Pods {
				if pod.DeletionTimestamp == nil && inAnswer[name] {
					running++
				}
				if !inAnswer[name] && !podUsesClaim(pod) && !o.Cluster.Spec.Persistent() && !recorded {
					t.Fatalf("hibernation on emptyDir stopped %s before the status held a final backup", name)
				}
			}
			if o.Cluster.Spec.Persistent() && running > 0 && running < membership.Quorum(members) && running < len(pods) {
				t.Fatalf("hibernation leaves %d member Pods running, short of a quorum of %d", running, membership.Quorum(members))
			}
			return
		}

		// An invalid spec, a pause, or a membership that cannot be read
		// keeps every observed Pod exactly as it was last applied.
		if frozen || o.Membership == nil || o.Membership.Stale {
			for name, pod := range o.Pods {
				// A verified restore replaces every Pod; a failed one drops
				// its own seed.
				// An ended Pod on a claim is dropped to come back on it.
				ended := !frozen && podFinished(pod) && podUsesClaim(pod)
				if !inAnswer[name] && !(verified && !frozen) && !(name == restoreSeed && !frozen) && !ended {
					t.Fatalf("Pod %s dropped without a linearizable membership (frozen=%v)", name, frozen)
				}
				if frozen && !keptAsApplied(d.Children, name, pod) {
					t.Fatalf("frozen cluster changed Pod %s", name)
				}
			}
			if d.Action != nil {
				t.Fatalf("action %s without a linearizable membership or on a frozen cluster", d.Action)
			}
			return
		}

		// A member's Pod on an emptyDir is its data: it never leaves the
		// answer while the member is in the membership, unless a verified
		// restore replaces the whole cluster.
		if verified && d.Action != nil {
			t.Fatalf("action %s on the old cluster in the sync that commits a restore", d.Action)
		}
		for _, m := range o.Membership.Members {
			if verified {
				break
			}
			n := membership.MemberName(m, o.Cluster.Name)
			if pod, ok := o.Pods[n]; ok && !podUsesClaim(pod) && !inAnswer[n] {
				t.Fatalf("member %s's Pod dropped before its removal", n)
			}
		}
		// A member whose Pod is ready loses it (a rollout on a claim) only
		// while every other member is ready: never two members out at once.
		dropped := 0
		for _, m := range o.Membership.Members {
			n := membership.MemberName(m, o.Cluster.Name)
			if pod, ok := o.Pods[n]; ok && podReady(pod) && !inAnswer[n] && !verified {
				dropped++
				for _, other := range o.Membership.Members {
					if on := membership.MemberName(other, o.Cluster.Name); on != n && !podReady(o.Pods[on]) {
						t.Fatalf("member %s's ready Pod dropped while member %s is not ready", n, on)
					}
				}
			}
		}
		if dropped > 1 {
			t.Fatalf("%d ready member Pods dropped at once", dropped)
		}
		if d.Action == nil {
			return
		}
		if !membership.HasQuorum(o.Membership) {
			t.Fatalf("action %s without quorum", d.Action)
		}
		if d.Action.Type == membership.ActionRemoveMember && !membership.CanRemove(o.Membership, d.Action.MemberID) {
			t.Fatalf("removal of %s would leave the others short of a quorum", d.Action.Name)
		}
		if d.Action.Type == membership.ActionAddMember && inAnswer[d.Action.Name] {
			t.Fatalf("the Pod of %s is in the answer before MemberAdd", d.Action.Name)
		}
	})
}

func keptAsApplied(children []plan.Child, name string, pod *corev1.Pod) bool {
	for _, c := range children {
		if c.Kind != plan.KindPod || c.Name != name {
			continue
		}
		raw, ok := c.Object.(json.RawMessage)
		return ok && string(raw) == pod.Annotations[plan.LastAppliedAnnotation]
	}
	return false
}
