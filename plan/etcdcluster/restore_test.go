package etcdcluster

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

const restoreUID = "7e57a11e-0000-4000-8000-000000000001"

var (
	restoreID   = "EtcdRestore/" + restoreUID
	restoreSeed = SeedName(testCluster, testUID+"/restore/"+restoreID)
	s3Source    = &v1beta2.S3BackupSource{Path: "backups/demo.db", AWSSecret: "aws", Endpoint: "http://s3.example:7070", ForcePathStyle: true}
)

func etcdRestore(edit ...func(*v1beta2.EtcdRestore)) func(*Observed) {
	return func(o *Observed) {
		r := &v1beta2.EtcdRestore{
			ObjectMeta: metav1.ObjectMeta{Name: testCluster, Namespace: testNS, UID: restoreUID},
			Spec: v1beta2.RestoreSpec{EtcdCluster: v1beta2.EtcdClusterRef{Name: testCluster},
				BackupStorageType: v1beta2.BackupStorageS3, S3: s3Source},
		}
		for _, e := range edit {
			e(r)
		}
		o.RestoreRequest = r
	}
}

// runningThree is a cluster of three that runs, with its record.
func runningThree(o *Observed) {
	rec := record(firstSeed, true)
	o.Cluster.Status.Bootstrap = rec
	o.Cluster.Status.Phase = v1beta2.PhaseRunning
	for i := 1; i <= 3; i++ {
		p := readyPod(name(i))
		p.Annotations[AnnotationSeedMember] = firstSeed
		o.Pods[p.Name] = p
	}
	o.Membership = memberList(1, member(1, name(1)), member(2, name(2)), member(3, name(3)))
	servicesLeft(o)
}

// fetchEnded is the restore seed's Pod after its fetch exited with code.
func fetchEnded(code int32, result string) func(*Observed) {
	return func(o *Observed) { o.Pods[restoreSeed] = seedFetched(restoreSeed, restoreID, code, result) }
}

// seedFetched is the Pod of a restore's seed whose fetch exited with
// code; -1: it has not ended yet.
func seedFetched(seed, request string, code int32, result string) *corev1.Pod {
	p := memberPod(seed, corev1.PodPending, false)
	p.Annotations[AnnotationSeedMember] = seed
	p.Annotations[AnnotationRestoreRequest] = request
	if code >= 0 {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{
			Name: restoreFetchContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Message: result, FinishedAt: metav1.NewTime(testNow.Add(-10e9)),
			}},
		}}
	}
	return p
}

// restoredThree is the cluster after the restore's seed started and two
// members joined it, converged; the peer Service carries the committed
// record, and so does the status.
func restoredThree(o *Observed) {
	rec := &v1beta2.BootstrapStatus{SeedMember: restoreSeed, Bootstrapped: true, RecreatedFrom: firstSeed,
		Restore: &v1beta2.RestoreRecord{Request: restoreID, Origin: "EtcdRestore " + testCluster, Source: v1beta2.ResolvedSource{S3: s3Source}, Revision: 4711}}
	o.Cluster.Status.Bootstrap = rec
	o.Cluster.Status.Restore = &v1beta2.ClusterRestoreStatus{Request: restoreID, Origin: rec.Restore.Origin, Phase: v1beta2.RestoreRestoring}
	stampedService(o, rec)
	o.Services[plan.ClientServiceName(testCluster)] = clientService(o.Cluster, true)
	for _, n := range []string{restoreSeed, name(2), name(3)} {
		p := readyPod(n)
		p.Annotations[AnnotationSeedMember] = restoreSeed
		o.Pods[n] = p
	}
	o.Membership = memberList(9, member(9, restoreSeed), member(2, name(2)), member(3, name(3)))
}

// The second EtcdRestore of a cluster, applied after the first was
// carried out and deleted.
const secondUID = "7e57a11e-0000-4000-8000-000000000002"

var (
	secondID   = "EtcdRestore/" + secondUID
	secondSeed = SeedName(testCluster, testUID+"/restore/"+secondID)
)

// secondRestore asks for a restore from another backup over the cluster
// restoredThree made; its seed's fetch exited with code (-1: still
// running).
func secondRestore(code int32, result string) func(*Observed) {
	return func(o *Observed) {
		etcdRestore(func(r *v1beta2.EtcdRestore) {
			r.UID = secondUID
			s3 := *s3Source
			s3.Path = "backups/later.db"
			r.Spec.S3 = &s3
		})(o)
		o.Pods[secondSeed] = seedFetched(secondSeed, secondID, code, result)
	}
}

// statusBeforeCommit: the status read is the one written before the
// commit (Verifying, the old cluster's record), as when the commit's
// status write was lost, or a sync on a stale cache overwrote it.
func statusBeforeCommit(o *Observed) {
	o.Cluster.Status.Bootstrap = record(firstSeed, true)
	o.Cluster.Status.Restore = &v1beta2.ClusterRestoreStatus{Request: restoreID, Origin: "EtcdRestore " + testCluster, Phase: v1beta2.RestoreVerifying}
}

type restoreOutcome struct {
	Pods         []string
	Seed         string // the record's seed
	Restored     string // the record's restore request
	Phase        v1beta2.RestorePhase
	Degraded     string
	Action       bool
	NewEmptySeed bool
}

func restoreOutcomeOf(o *Observed, d Decision) restoreOutcome {
	out := restoreOutcome{Pods: podsIn(d.Children), Action: d.Action != nil}
	if rec := d.Status.Bootstrap; rec != nil {
		out.Seed = rec.SeedMember
		if rec.Restore != nil {
			out.Restored = rec.Restore.Request
		}
	}
	if d.Status.Restore != nil {
		out.Phase = d.Status.Restore.Phase
	}
	if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Status == metav1.ConditionTrue {
		out.Degraded = deg.Reason
	}
	for _, c := range d.Children {
		if pod, ok := c.Object.(*corev1.Pod); ok && len(pod.Spec.InitContainers) == 0 && slices.Contains(pod.Spec.Containers[0].Command, "--initial-cluster-state=new") {
			out.NewEmptySeed = true
		}
	}
	return out
}

func TestRestorePlan(t *testing.T) {
	old := []string{name(1), name(2), name(3)}
	restored := []string{name(2), name(3), restoreSeed}
	slices.Sort(restored)
	withSecondSeed := append(slices.Clone(restored), secondSeed)
	slices.Sort(withSecondSeed)
	withSeed := append(slices.Clone(old), restoreSeed)
	slices.Sort(withSeed)
	good := `{"succeeded":true,"source":"s3://backups/demo.db","size":1024,"sha256":"ab","revision":4711,"etcdVersion":"3.6.16"}`
	cases := []struct {
		name   string
		reason string
		edits  []func(*Observed)
		want   restoreOutcome
	}{{
		name:   "requested over a running cluster",
		reason: "the seed of the restored cluster starts beside the members, which are untouched until it has verified the snapshot",
		edits:  []func(*Observed){runningThree, etcdRestore()},
		want:   restoreOutcome{Pods: withSeed, Seed: firstSeed, Phase: v1beta2.RestoreVerifying},
	}, {
		name:   "fetch retrying",
		reason: "a transient failure (the store unreachable) is retried by the kubelet, and the cluster stays as it is",
		edits:  []func(*Observed){runningThree, etcdRestore(), fetchEnded(1, `{"reason":"dial tcp: connection refused"}`)},
		want:   restoreOutcome{Pods: withSeed, Seed: firstSeed, Phase: v1beta2.RestoreVerifying},
	}, {
		name:   "backup unusable",
		reason: "a missing or corrupt backup drops the seed and fails the request; the members are as they were",
		edits:  []func(*Observed){runningThree, etcdRestore(), fetchEnded(3, `{"permanent":true,"reason":"sha256 mismatch"}`)},
		want:   restoreOutcome{Pods: old, Seed: firstSeed, Phase: v1beta2.RestoreFailed, Degraded: ReasonRestoreFailed},
	}, {
		name:   "failed before",
		reason: "a failed request is never tried again (the EtcdRestore must be replaced), and is reported while it stands",
		edits: []func(*Observed){runningThree, etcdRestore(), func(o *Observed) {
			o.Cluster.Status.Restore = &v1beta2.ClusterRestoreStatus{Request: restoreID, Phase: v1beta2.RestoreFailed}
		}},
		want: restoreOutcome{Pods: old, Seed: firstSeed, Phase: v1beta2.RestoreFailed, Degraded: ReasonRestoreFailed},
	}, {
		name:   "verified",
		reason: "the snapshot is good: the restore is committed, the old members are dropped, and no membership change is made on the old cluster",
		edits:  []func(*Observed){runningThree, etcdRestore(), fetchEnded(0, good)},
		want:   restoreOutcome{Pods: []string{restoreSeed}, Seed: restoreSeed, Restored: restoreID, Phase: v1beta2.RestoreRestoring, Degraded: ReasonQuorumLost},
	}, {
		name:   "done",
		reason: "a committed request is not carried out again while its EtcdRestore stays",
		edits: []func(*Observed){etcdRestore(), func(o *Observed) {
			rec := &v1beta2.BootstrapStatus{SeedMember: restoreSeed, Bootstrapped: true, RecreatedFrom: firstSeed,
				Restore: &v1beta2.RestoreRecord{Request: restoreID, Source: v1beta2.ResolvedSource{S3: s3Source}}}
			o.Cluster.Status.Bootstrap = rec
			p := readyPod(restoreSeed)
			p.Annotations[AnnotationSeedMember] = restoreSeed
			o.Pods[p.Name] = p
			old := readyPod(name(1))
			old.Annotations[AnnotationSeedMember] = firstSeed
			o.Pods[old.Name] = old
			o.Membership = memberList(9, member(9, restoreSeed))
			servicesLeft(o)
		}},
		want: restoreOutcome{Pods: []string{restoreSeed}, Seed: restoreSeed, Restored: restoreID, Phase: v1beta2.RestoreRestoring, Action: true},
	}, {
		name:   "commit's status lost, converged",
		reason: "the status the commit wrote was lost or overwritten (it still says Verifying, with the old record), but the peer Service's record says committed: a cluster that matches its spec reports the restore Completed",
		edits:  []func(*Observed){etcdRestore(), restoredThree, statusBeforeCommit},
		want:   restoreOutcome{Pods: restored, Seed: restoreSeed, Restored: restoreID, Phase: v1beta2.RestoreCompleted},
	}, {
		name:   "commit's status lost, joining",
		reason: "as above while a member still joins: Restoring, never Verifying again",
		edits: []func(*Observed){etcdRestore(), restoredThree, statusBeforeCommit, func(o *Observed) {
			o.Pods[name(3)] = memberPod(name(3), corev1.PodPending, false)
			o.Pods[name(3)].Annotations[AnnotationSeedMember] = restoreSeed
			o.Membership.Members[2] = learner(3, name(3), 0)
			o.Membership.Members[2].Reachable = false
		}},
		want: restoreOutcome{Pods: restored, Seed: restoreSeed, Restored: restoreID, Phase: v1beta2.RestoreRestoring},
	}, {
		name:   "status wiped after the restore",
		reason: "with no status.restore at all, the record alone says which restore the cluster runs on",
		edits: []func(*Observed){etcdRestore(), restoredThree, statusBeforeCommit, func(o *Observed) {
			o.Cluster.Status = v1beta2.ClusterStatus{}
		}},
		want: restoreOutcome{Pods: restored, Seed: restoreSeed, Restored: restoreID, Phase: v1beta2.RestoreCompleted},
	}, {
		name:   "a second restore, requested",
		reason: "over a cluster restored before, a new EtcdRestore's seed starts beside the members, which are untouched",
		edits:  []func(*Observed){restoredThree, secondRestore(-1, "")},
		want:   restoreOutcome{Pods: withSecondSeed, Seed: restoreSeed, Restored: restoreID, Phase: v1beta2.RestoreVerifying},
	}, {
		name:   "a second restore, verified",
		reason: "its seed's Pod is of another etcd cluster than the recorded one, yet it is this request's: once it has verified the snapshot the request is committed, and the members of the first restore are dropped",
		edits:  []func(*Observed){restoredThree, secondRestore(0, good)},
		want:   restoreOutcome{Pods: []string{secondSeed}, Seed: secondSeed, Restored: secondID, Phase: v1beta2.RestoreRestoring},
	}, {
		name:   "every member lost",
		reason: "a restore over a lost cluster starts the restored seed and nothing empty",
		edits: []func(*Observed){withRecord(record(firstSeed, true)), servicesLeft, etcdRestore(), func(o *Observed) {
			o.Cluster.Status.Phase = v1beta2.PhaseFailed
		}},
		want: restoreOutcome{Pods: []string{restoreSeed}, Seed: firstSeed, Phase: v1beta2.RestoreVerifying, Degraded: ReasonAllMembersLost},
	}, {
		name:   "new cluster, restore failed",
		reason: "a cluster created for an EtcdRestore that failed waits instead of starting empty",
		edits: []func(*Observed){etcdRestore(), func(o *Observed) {
			o.Cluster.Status.Restore = &v1beta2.ClusterRestoreStatus{Request: restoreID, Phase: v1beta2.RestoreFailed}
		}},
		want: restoreOutcome{Seed: firstSeed, Phase: v1beta2.RestoreFailed, Degraded: ReasonRestoreFailed},
	}, {
		name:   "new cluster, restore verifying",
		reason: "the record names the first seed, never run, not the uncommitted restore seed",
		edits:  []func(*Observed){etcdRestore(), fetchEnded(1, "{}")},
		want:   restoreOutcome{Pods: []string{restoreSeed}, Seed: firstSeed, Phase: v1beta2.RestoreVerifying},
	}, {
		name:   "name differs",
		reason: "an EtcdRestore not named after its cluster is refused and changes nothing",
		edits: []func(*Observed){runningThree, etcdRestore(func(r *v1beta2.EtcdRestore) {
			r.Spec.EtcdCluster.Name = "other"
		})},
		want: restoreOutcome{Pods: old, Seed: firstSeed, Phase: v1beta2.RestoreRefused, Degraded: ReasonRestoreRefused},
	}, {
		name:   "same backup again",
		reason: "an EtcdRestore applied again (a new UID) from the backup already restored is refused",
		edits: []func(*Observed){runningThree, etcdRestore(), func(o *Observed) {
			o.Cluster.Status.Bootstrap.Restore = &v1beta2.RestoreRecord{Request: "EtcdRestore/earlier", Source: v1beta2.ResolvedSource{S3: s3Source}}
		}},
		want: restoreOutcome{Pods: old, Seed: firstSeed, Restored: "EtcdRestore/earlier", Phase: v1beta2.RestoreRefused, Degraded: ReasonRestoreRefused},
	}, {
		name:   "same backup, asked again",
		reason: "the restore-again annotation naming the earlier request lets it restore once more",
		edits: []func(*Observed){runningThree, etcdRestore(func(r *v1beta2.EtcdRestore) {
			r.Annotations = map[string]string{v1beta2.AnnotationRestoreAgain: "EtcdRestore/earlier"}
		}), func(o *Observed) {
			o.Cluster.Status.Bootstrap.Restore = &v1beta2.RestoreRecord{Request: "EtcdRestore/earlier", Source: v1beta2.ResolvedSource{S3: s3Source}}
		}},
		want: restoreOutcome{Pods: withSeed, Seed: firstSeed, Restored: "EtcdRestore/earlier", Phase: v1beta2.RestoreVerifying},
	}, {
		name:   "backup named but missing",
		reason: "an EtcdRestore naming an EtcdBackup that does not exist is refused",
		edits: []func(*Observed){runningThree, etcdRestore(func(r *v1beta2.EtcdRestore) {
			r.Spec = v1beta2.RestoreSpec{EtcdCluster: r.Spec.EtcdCluster, Backup: &v1beta2.BackupRef{Name: "nightly"}}
		})},
		want: restoreOutcome{Pods: old, Seed: firstSeed, Phase: v1beta2.RestoreRefused, Degraded: ReasonRestoreRefused},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := apply(observed(newCluster(3, "3.6.16")), tc.edits...)
			pods, claims := slices.Sorted(maps.Keys(o.Pods)), slices.Sorted(maps.Keys(o.PVCs))
			got := restoreOutcomeOf(o, Plan(o))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
			// The reconciler plans again on the same observation: the
			// restore takes Pods out of the planner's view, not the caller's.
			if diff := cmp.Diff([][]string{pods, claims}, [][]string{slices.Sorted(maps.Keys(o.Pods)), slices.Sorted(maps.Keys(o.PVCs))}); diff != "" {
				t.Errorf("Plan changed the observed Pods or claims (-before +after):\n%s", diff)
			}
		})
	}
}

func TestBornFromBackup(t *testing.T) {
	spec := &v1beta2.RestoreSource{S3: s3Source}
	id := "spec.restore/" + sourceHash(*spec)
	seed := SeedName(testCluster, testUID+"/restore/"+id)
	fresh := func(o *Observed) { o.Cluster.Spec.Restore = spec }
	failed := func(o *Observed) {
		o.Cluster.Status.Restore = &v1beta2.ClusterRestoreStatus{Request: id, Phase: v1beta2.RestoreFailed}
	}
	cases := []struct {
		name, reason string
		edits        []func(*Observed)
		want         restoreOutcome
	}{
		{"new", "the first seed restores the backup; no empty seed", []func(*Observed){fresh},
			restoreOutcome{Pods: []string{seed}, Seed: firstSeed, Phase: v1beta2.RestoreVerifying}},
		{"failed", "a cluster whose backup failed waits for a usable one instead of starting empty", []func(*Observed){fresh, failed},
			restoreOutcome{Seed: firstSeed, Phase: v1beta2.RestoreFailed, Degraded: ReasonRestoreFailed}},
		{"ran", "spec.restore on a cluster that ran changes nothing", []func(*Observed){fresh, runningThree},
			restoreOutcome{Pods: []string{name(1), name(2), name(3)}, Seed: firstSeed}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := apply(observed(newCluster(3, "3.6.16")), tc.edits...)
			got := restoreOutcomeOf(o, Plan(o))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

// TestRestoreSteps checks the init containers a restored seed gets for
// each etcd line: its own tool, and the revision bump where it exists.
func TestRestoreSteps(t *testing.T) {
	cases := []struct {
		version, reason string
		want            []string // what the apply step's command holds
		not             []string
	}{
		{"3.6.16", "etcdutl with --bump-revision and --mark-compacted", []string{"--etcdutl=/usr/local/bin/etcdutl", "--bump-revision=1000000000", "--mark-compacted"}, nil},
		{"3.5.10", "the first 3.5 with --bump-revision", []string{"--etcdutl=/usr/local/bin/etcdutl", "--bump-revision=1000000000"}, nil},
		{"3.5.9", "etcdutl, but no --bump-revision yet", []string{"--etcdutl=/usr/local/bin/etcdutl"}, []string{"--mark-compacted"}},
		{"3.4.23", "etcdctl below 3.5", []string{"--etcdctl=/usr/local/bin/etcdctl"}, []string{"--mark-compacted"}},
	}
	for _, tc := range cases {
		t.Run(tc.version, func(t *testing.T) {
			o := apply(observed(newCluster(3, tc.version)), runningThree, etcdRestore())
			o.AgentImage = "registry.example/etcd-hook:v1"
			d := Plan(o)
			pod := renderedPod(d.Children, restoreSeed)
			if pod == nil || len(pod.Spec.InitContainers) != 2 {
				t.Fatalf("restore seed not rendered with two init containers: %+v", pod)
			}
			fetch, apply := pod.Spec.InitContainers[0], pod.Spec.InitContainers[1]
			if fetch.Image != o.AgentImage || apply.Image != "quay.io/coreos/etcd:v"+tc.version {
				t.Errorf("images: fetch %s, restore %s", fetch.Image, apply.Image)
			}
			args := strings.Join(fetch.Args, " ")
			for _, w := range []string{"--s3-path=backups/demo.db", "--s3-endpoint=http://s3.example:7070", "--s3-force-path-style", "--etcd-version=" + tc.version, "--data-dir=/var/etcd/data"} {
				if !strings.Contains(args, w) {
					t.Errorf("fetch args %q lack %q", args, w)
				}
			}
			cmd := strings.Join(apply.Command, " ")
			for _, w := range tc.want {
				if !strings.Contains(cmd, w) {
					t.Errorf("%s: restore command %q lacks %q", tc.reason, cmd, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(cmd, n) {
					t.Errorf("%s: restore command %q has %q", tc.reason, cmd, n)
				}
			}
			var secret *corev1.SecretVolumeSource
			for _, v := range pod.Spec.Volumes {
				if v.Secret != nil {
					secret = v.Secret
				}
			}
			if secret == nil || secret.SecretName != "aws" || secret.Optional == nil || !*secret.Optional {
				t.Errorf("the awsSecret volume must be optional, so that the fetch reports a missing Secret: %+v", secret)
			}
		})
	}
}

// TestRestoredSeedRenderedAgain: a restored cluster's seed Pod that is
// gone before it ran is rendered again with its restore steps, never as an
// empty seed.
func TestRestoredSeedRenderedAgain(t *testing.T) {
	o := observed(newCluster(3, "3.6.16"))
	o.Cluster.Status.Bootstrap = &v1beta2.BootstrapStatus{SeedMember: restoreSeed, RecreatedFrom: firstSeed,
		Restore: &v1beta2.RestoreRecord{Request: restoreID, Source: v1beta2.ResolvedSource{S3: s3Source, SHA256: "abc"}}}
	servicesLeft(o)
	d := Plan(o)
	pod := renderedPod(d.Children, restoreSeed)
	if pod == nil || len(pod.Spec.InitContainers) != 2 {
		t.Fatalf("seed not rendered with its restore steps: %+v", podsIn(d.Children))
	}
	if !slices.Contains(pod.Spec.InitContainers[0].Args, "--sha256=abc") {
		t.Errorf("fetch args %v: the recorded sha256 must be checked", pod.Spec.InitContainers[0].Args)
	}
}

// TestExcludedFromMembership: the verifying seed runs another etcd cluster
// and is never asked for the membership; after the commit, the old members
// are not either.
func TestExcludedFromMembership(t *testing.T) {
	o := apply(observed(newCluster(3, "3.6.16")), runningThree, etcdRestore(), fetchEnded(0, "{}"))
	if got := ExcludedFromMembership(o); !cmp.Equal(got, map[string]bool{restoreSeed: true}) {
		t.Errorf("verifying: excluded %v, want the seed only", got)
	}
	d := Plan(o)
	o.Cluster.Status = d.Status
	want := map[string]bool{name(1): true, name(2): true, name(3): true}
	if got := ExcludedFromMembership(o); !cmp.Equal(got, want) {
		t.Errorf("committed: excluded %v, want the old members", got)
	}
	if r := d.Status.Restore; r == nil || r.Phase != v1beta2.RestoreRestoring || r.RestoredAt == nil {
		t.Errorf("committed: status.restore = %+v, want Restoring with the time the fetch verified", r)
	}
	// The record only on the peer Service (the status wiped by hand) and
	// no Pod a restore's seed any more: the old members are told apart
	// all the same.
	wiped := apply(observed(newCluster(3, "3.6.16")), runningThree)
	wiped.Cluster.Status.Bootstrap = nil
	stampedService(wiped, d.Status.Bootstrap)
	if got := ExcludedFromMembership(wiped); !cmp.Equal(got, want) {
		t.Errorf("the record on the Service only: excluded %v, want the old members", got)
	}
	// And with no restore anywhere, nothing is.
	if got := ExcludedFromMembership(apply(observed(newCluster(3, "3.6.16")), runningThree)); len(got) != 0 {
		t.Errorf("no restore: excluded %v, want none", got)
	}
}

// TestBornFromBackupSequence replays the syncs of a new cluster born from
// a backup, each reading what the previous answered (status and Services),
// as Metacontroller hands them back: the restore is committed once the
// seed's fetch succeeded, and the cluster then grows.
func TestBornFromBackupSequence(t *testing.T) {
	spec := &v1beta2.RestoreSource{S3: s3Source}
	seed := SeedName(testCluster, testUID+"/restore/spec.restore/"+sourceHash(*spec))
	o := observed(newCluster(3, "3.6.16"))
	o.Cluster.Spec.Restore = spec
	carry := func(d Decision) {
		o.Cluster.Status = d.Status
		for _, c := range d.Children {
			if svc, ok := c.Object.(*corev1.Service); ok {
				o.Services[c.Name] = svc
			}
		}
	}
	d := Plan(o)
	if renderedPod(d.Children, seed) == nil {
		t.Fatalf("sync 1: the restore seed %s is not rendered: %v", seed, podsIn(d.Children))
	}
	carry(d)

	// Sync 2: the seed's fetch is running.
	p := memberPod(seed, corev1.PodPending, false)
	p.Annotations[AnnotationSeedMember] = seed
	p.Annotations[AnnotationRestoreRequest] = "spec.restore/" + sourceHash(*spec)
	o.Pods[seed] = p
	d = Plan(o)
	if d.Status.Restore == nil || d.Status.Restore.Phase != v1beta2.RestoreVerifying {
		t.Fatalf("sync 2: status.restore %+v, want Verifying", d.Status.Restore)
	}
	carry(d)

	// Sync 3: the seed runs on the restored data.
	running := readyPod(seed)
	running.Annotations = p.Annotations
	running.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: restoreFetchContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	o.Pods[seed] = running
	d = Plan(o)
	if rec := d.Status.Bootstrap; rec == nil || rec.SeedMember != seed || rec.Restore == nil || rec.RecreatedFrom != "" {
		t.Fatalf("sync 3: record %+v, want the restore seed committed, recreated from nothing", d.Status.Bootstrap)
	}
	carry(d)

	// Sync 4: etcd answers; the cluster grows.
	if ex := ExcludedFromMembership(o); len(ex) > 0 {
		t.Fatalf("sync 4: %v excluded from the membership read", ex)
	}
	o.Membership = memberList(1, member(1, seed))
	if d = Plan(o); d.Action == nil || d.Action.Type != membership.ActionAddMember {
		t.Fatalf("sync 4: action %v, want a learner added", d.Action)
	}
}

// TestDisasterRecoveryPolicy: a cluster that lost every member names its
// newest backup in status; only with autoRestore does it restore it, once
// per loss, from the EtcdBackup's own store and sha256.
func TestDisasterRecoveryPolicy(t *testing.T) {
	nightly := &v1beta2.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: testNS},
		Spec: v1beta2.BackupSpec{ClusterName: testCluster, StorageType: v1beta2.BackupStorageS3,
			S3: &v1beta2.S3BackupSource{Path: "backups/demo.db", AWSSecret: "aws", Endpoint: "http://s3.example:7070"}},
		Status: v1beta2.BackupStatus{LastBackup: &v1beta2.StoredBackup{Location: "s3://backups/demo.db_v4711_20261122T070000Z",
			SHA256: "abc", Revision: 4711, EtcdVersion: "3.6.16", Time: metav1.NewTime(testNow.Add(-time.Hour))}},
	}
	lost := func(auto bool) *Observed {
		o := apply(observed(newCluster(3, "3.6.16")), withRecord(record(firstSeed, true)), servicesLeft)
		o.Backups = map[string]*v1beta2.EtcdBackup{"nightly": nightly}
		o.Cluster.Spec.DisasterRecovery = &v1beta2.DisasterRecoveryPolicy{AutoRestore: auto}
		return o
	}
	autoSeed := SeedName(testCluster, testUID+"/restore/autoRestore/"+firstSeed)

	d := Plan(lost(false))
	if pods := podsIn(d.Children); len(pods) != 0 {
		t.Errorf("without autoRestore: Pods %v, want none", pods)
	}
	if nb := d.Status.NewestBackup; nb == nil || nb.EtcdBackup != "nightly" || nb.Revision != 4711 {
		t.Errorf("status.newestBackup = %+v, want nightly at 4711", nb)
	}
	if msg := conditionOf(d.Status, v1beta2.ConditionDegraded).Message; !strings.Contains(msg, "s3://backups/demo.db_v4711_20261122T070000Z") ||
		!strings.Contains(msg, "revision 4711") || !strings.Contains(msg, "1h0m0s ago") {
		t.Errorf("the loss's message does not name the backup, its revision and age: %q", msg)
	}

	d = Plan(lost(true))
	pod := renderedPod(d.Children, autoSeed)
	if pod == nil {
		t.Fatalf("with autoRestore: Pods %v, want the restore seed %s", podsIn(d.Children), autoSeed)
	}
	args := strings.Join(pod.Spec.InitContainers[0].Args, " ")
	for _, w := range []string{"--s3-path=backups/demo.db_v4711_20261122T070000Z", "--sha256=abc", "--s3-endpoint=http://s3.example:7070"} {
		if !strings.Contains(args, w) {
			t.Errorf("fetch args %q lack %q", args, w)
		}
	}
	if r := d.Status.Restore; r == nil || r.Request != "autoRestore/"+firstSeed || r.Revision != 4711 || r.BackupTime == nil {
		t.Errorf("status.restore = %+v, want the automatic request with the backup's revision and time", r)
	}
}
