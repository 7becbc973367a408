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
			result: `{"succeeded":true,"source":"s3://backups/demo.db at the state as of 2026-11-27T04:00:00Z","revision":5120,"etcdVersion":"3.6.16"}`,
			fetch:  []string{"--chain", "--s3-path=backups/demo.db ", "--revision=5120", "--key-file=/etc/etcd-restore/key/key"}, notFetch: []string{"--time=", " at "},
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
