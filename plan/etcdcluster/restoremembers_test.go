package etcdcluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// flag is the value of --name= among args, or "".
func flag(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestParallelRestore: a restore starts every member at once. The seed is
// rendered naming them all; once its fetch has verified the backup, the
// others are rendered beside it, each restoring the same state with the
// same initial cluster and token; none joins as a learner.
func TestParallelRestore(t *testing.T) {
	at := metav1.NewTime(testNow.Add(-time.Hour))
	cases := []struct {
		name, reason string
		edit         func(*v1beta2.EtcdRestore)
		result       string
		// fetch are the arguments every member's fetch must hold, and
		// notFetch those none may.
		fetch, notFetch []string
	}{
		{
			name: "snapshot", reason: "a snapshot object: every member checks the sha256 the seed fetched",
			result: `{"succeeded":true,"source":"s3://backups/demo.db","sha256":"ab12","revision":4711,"etcdVersion":"3.6.16"}`,
			fetch:  []string{"--s3-path=backups/demo.db", "--sha256=ab12"}, notFetch: []string{"--chain"},
		},
		{
			name: "chain at a moment", reason: "a chain's moment: the others rebuild the revision the seed resolved it to, not the moment again",
			edit: func(r *v1beta2.EtcdRestore) {
				r.Spec.Time = &at
				r.Spec.Encryption = &v1beta2.EncryptionKey{SecretName: "backup-key", Key: "key"}
			},
			result: `{"succeeded":true,"source":"s3://backups/demo.db at the state as of 2026-11-27T04:00:00Z","sha256":"cd34","revision":5120,"history":"00000000000000ab","etcdVersion":"3.6.16"}`,
			fetch:  []string{"--chain", "--s3-path=backups/demo.db.pitr/00000000000000ab/ ", "--revision=5120", "--key-file=/etc/etcd-restore/key/key"}, notFetch: []string{"--time=", " at ", "--sha256"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var edits []func(*v1beta2.EtcdRestore)
			if tc.edit != nil {
				edits = append(edits, tc.edit)
			}
			// Verifying: the seed names three members.
			o := apply(observed(newCluster(3, "3.6.16")), runningThree, etcdRestore(edits...))
			seed := renderedPod(Plan(o).Children, restoreSeed)
			if seed == nil {
				t.Fatal("no restore seed rendered")
			}
			members := strings.Split(seed.Annotations[AnnotationRestoreMembers], ",")
			if len(members) != 3 || members[0] != restoreSeed {
				t.Fatalf("%s annotation %q: want the seed and two more", AnnotationRestoreMembers, seed.Annotations[AnnotationRestoreMembers])
			}
			initial := flag(seed.Spec.InitContainers[1].Command, "initial-cluster")
			for _, m := range members {
				if !strings.Contains(initial, m+"=") {
					t.Errorf("the seed's restore --initial-cluster %q lacks %s", initial, m)
				}
			}

			// The fetch verified: committed, and the others rendered.
			o = apply(observed(newCluster(3, "3.6.16")), runningThree, etcdRestore(edits...))
			fetched := seed.DeepCopy()
			fetched.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: restoreFetchContainer, State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: tc.result, FinishedAt: metav1.NewTime(testNow.Add(-10e9))}}}}
			o.Pods[restoreSeed] = fetched
			d := Plan(o)
			if d.Action != nil {
				t.Errorf("a membership change at the commit: %+v", d.Action)
			}
			if got := podsIn(d.Children); !cmp.Equal(got, sorted(members)) {
				t.Errorf("Pods after the commit: %v, want the restore's members %v alone", got, sorted(members))
			}
			rec := d.Status.Bootstrap
			if rec == nil || rec.Restore == nil || !slices.Equal(rec.Restore.Members, members) {
				t.Fatalf("the record does not name the restore's members: %+v", rec)
			}
			token := flag(seed.Spec.InitContainers[1].Command, "initial-cluster-token")
			for _, m := range members[1:] {
				pod := renderedPod(d.Children, m)
				if pod == nil || len(pod.Spec.InitContainers) != 2 {
					t.Fatalf("%s: %s not rendered with its restore steps", tc.reason, m)
				}
				apply := pod.Spec.InitContainers[1].Command
				if got := flag(apply, "initial-cluster"); got != initial {
					t.Errorf("%s restores with --initial-cluster %q, the seed with %q", m, got, initial)
				}
				if got := flag(apply, "initial-cluster-token"); got != token {
					t.Errorf("%s restores with token %q, the seed with %q", m, got, token)
				}
				if got := flag(apply, "name"); got != m {
					t.Errorf("%s restores as --name %q", m, got)
				}
				args := strings.Join(pod.Spec.InitContainers[0].Args, " ")
				for _, w := range tc.fetch {
					if !strings.Contains(args, w) {
						t.Errorf("%s: %s fetches with %q, lacking %q", tc.reason, m, args, w)
					}
				}
				for _, n := range tc.notFetch {
					if strings.Contains(args, n) {
						t.Errorf("%s: %s fetches with %q, holding %q", tc.reason, m, args, n)
					}
				}
			}

			// Formed: the three answer as one cluster; nothing is added.
			o = observed(newCluster(3, "3.6.16"))
			o.Cluster.Status.Bootstrap = rec
			stampedService(o, rec)
			for _, m := range members {
				p := readyPod(m)
				p.Annotations[AnnotationSeedMember] = restoreSeed
				p.Annotations[AnnotationRestoreRequest] = restoreID
				o.Pods[m] = p
			}
			o.Membership = memberList(9, member(9, members[0]), member(10, members[1]), member(11, members[2]))
			d = Plan(o)
			if d.Action != nil {
				t.Errorf("formed: a membership change %+v, want none", d.Action)
			}
			if got := podsIn(d.Children); !cmp.Equal(got, sorted(members)) {
				t.Errorf("formed: Pods %v, want %v", got, sorted(members))
			}
		})
	}
}

// restoreCommitted is a cluster whose restore of three members was
// committed (the record names them) and has not formed yet; pods are the
// members' Pods that exist, each as edited.
func restoreCommitted(members []string, pods map[string]func(*corev1.Pod)) *Observed {
	o := observed(newCluster(3, "3.6.16"))
	rec := &v1beta2.BootstrapStatus{SeedMember: members[0], RecreatedFrom: firstSeed,
		Restore: &v1beta2.RestoreRecord{Request: restoreID, Source: v1beta2.ResolvedSource{S3: s3Source, SHA256: "ab12"}, Members: members}}
	o.Cluster.Status.Bootstrap = rec
	stampedService(o, rec)
	for name, edit := range pods {
		p := memberPod(name, corev1.PodRunning, false)
		p.Annotations[AnnotationSeedMember] = members[0]
		p.Annotations[AnnotationRestoreRequest] = restoreID
		if edit != nil {
			edit(p)
		}
		o.Pods[name] = p
	}
	return o
}

// TestRestoredMembersLost: until the restored members have formed a
// cluster, a member whose Pod is gone restores again under its name, the
// seed too; once one was seen Ready, it is a dead member and never
// restored again (it may have acknowledged writes). A member whose fetch
// fails is named in the status.
func TestRestoredMembersLost(t *testing.T) {
	members := []string{restoreSeed, SeedName(testCluster, "m1"), SeedName(testCluster, "m2")}
	ready := func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	failedFetch := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: restoreFetchContainer, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Message: `{"permanent":true,"reason":"wrong key"}`}}}}
	}
	cases := []struct {
		name, reason string
		pods         map[string]func(*corev1.Pod)
		rendered     []string // Pods rendered with restore steps, new
		formed       bool
		message      string
	}{
		{"a member gone before forming", "restored again under its name", map[string]func(*corev1.Pod){members[0]: nil, members[1]: nil}, []string{members[2]}, false, ""},
		{"the seed gone before forming", "the seed restores again too", map[string]func(*corev1.Pod){members[1]: nil, members[2]: nil}, []string{members[0]}, false, ""},
		{"a member gone after forming", "a member was Ready: the one gone is dead, not restored", map[string]func(*corev1.Pod){members[0]: ready, members[1]: nil}, nil, true, ""},
		{"a member's fetch failed", "the status names the member and the reason", map[string]func(*corev1.Pod){members[0]: nil, members[1]: nil, members[2]: failedFetch}, nil, false, "member " + members[2] + " cannot restore the backup: wrong key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := restoreCommitted(members, tc.pods)
			d := Plan(o)
			var rendered []string
			for _, c := range d.Children {
				if _, observed := o.Pods[c.Name]; observed {
					continue
				}
				if pod, ok := c.Object.(*corev1.Pod); ok {
					if len(pod.Spec.InitContainers) != 2 {
						t.Errorf("%s rendered without its restore steps", c.Name)
					}
					rendered = append(rendered, c.Name)
				}
			}
			if diff := cmp.Diff(tc.rendered, rendered); diff != "" {
				t.Errorf("%s: Pods rendered (-want +got):\n%s", tc.reason, diff)
			}
			if got := d.Status.Bootstrap != nil && d.Status.Bootstrap.Formed; got != tc.formed {
				t.Errorf("%s: the record's formed is %v, want %v", tc.reason, got, tc.formed)
			}
			if tc.message != "" && (d.Status.Restore == nil || !strings.Contains(d.Status.Restore.Message, tc.message)) {
				t.Errorf("%s: status.restore %+v does not say %q", tc.reason, d.Status.Restore, tc.message)
			}
		})
	}
}

// TestRestoreFromClaimIsSerial: a backup on a claim is restored by the
// seed alone; every member mounting a ReadWriteOnce claim could not run
// on more than one node.
func TestRestoreFromClaimIsSerial(t *testing.T) {
	o := apply(observed(newCluster(3, "3.6.16")), runningThree, etcdRestore(func(r *v1beta2.EtcdRestore) {
		r.Spec.BackupStorageType, r.Spec.S3 = v1beta2.BackupStoragePVC, nil
		r.Spec.PVC = &v1beta2.PVCBackupSource{ClaimName: "backups", Path: "demo.db"}
	}))
	seed := renderedPod(Plan(o).Children, restoreSeed)
	if seed == nil || seed.Annotations[AnnotationRestoreMembers] != restoreSeed {
		t.Errorf("a restore from a claim names members %q, want the seed alone", seed.Annotations[AnnotationRestoreMembers])
	}
}
