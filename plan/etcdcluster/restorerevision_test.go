package etcdcluster

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// atRevision: every member answered at rev.
func atRevision(rev int64) func(*Observed) {
	return func(o *Observed) {
		for i := range o.Membership.Members {
			o.Membership.Members[i].Revision = rev
		}
	}
}

// seenRecord: the status's record and its copy on the peer Service say
// the cluster was seen at rev.
func seenRecord(rev int64) func(*Observed) {
	return func(o *Observed) {
		rec := *o.Cluster.Status.Bootstrap
		rec.RevisionSeen = rev
		o.Cluster.Status.Bootstrap = &rec
		stampedService(o, &rec)
	}
}

// replacedRevisionArg is the seed's --replaced-revision, and its
// annotation; "" for none.
func replacedRevisionArg(t *testing.T, d Decision, seed string) (flag, annotation string) {
	t.Helper()
	pod := renderedPod(d.Children, seed)
	if pod == nil || len(pod.Spec.InitContainers) != 2 {
		t.Fatalf("seed %s not rendered with its restore steps: %v", seed, podsIn(d.Children))
	}
	for _, a := range pod.Spec.InitContainers[1].Command {
		if v, ok := strings.CutPrefix(a, "--replaced-revision="); ok {
			flag = v
		}
	}
	return flag, pod.Annotations[AnnotationReplacedRevision]
}

// TestRestoredRevisionAboveReplacedHistory: a restore never hands out a
// revision the history it replaces handed out, even from a snapshot taken
// before an earlier restore (the soak's finding: a fixed bump brought such
// a snapshot back below the earlier restore's revisions). The seed's bump
// counts from the highest revision known, fixed when the seed is rendered.
func TestRestoredRevisionAboveReplacedHistory(t *testing.T) {
	const live = 1_000_010_800 // the history an earlier restore started
	cases := []struct {
		name, reason string
		version      string
		edits        []func(*Observed)
		want         string // --replaced-revision, and the seed's annotation
	}{{
		name:    "running cluster",
		reason:  "the members' revisions in this sync are the replaced history's",
		version: "3.6.16",
		edits:   []func(*Observed){runningThree, atRevision(live), etcdRestore()},
		want:    "1000010800",
	}, {
		name:    "record above the members",
		reason:  "a record that saw more than the members say now (after a restore, the members are the new history) wins",
		version: "3.6.16",
		edits:   []func(*Observed){runningThree, atRevision(5_000), seenRecord(2_000_000_000), etcdRestore()},
		want:    "2000000000",
	}, {
		name:    "every member lost",
		reason:  "nothing answers: the record, kept on the peer Service too, remembers",
		version: "3.6.16",
		edits: []func(*Observed){
			withRecord(record(firstSeed, true)), seenRecord(3_000_000_000),
			func(o *Observed) { o.Cluster.Status.Bootstrap = nil }, etcdRestore(),
		},
		want: "3000000000",
	}, {
		name:    "never seen",
		reason:  "a cluster born from a backup has no history to rise above: the flag is left out, as before it existed",
		version: "3.6.16",
		edits:   []func(*Observed){etcdRestore()},
		want:    "",
	}, {
		name:    "no bump in this release",
		reason:  "etcd 3.5.9 has no --bump-revision; nothing to count from",
		version: "3.5.9",
		edits:   []func(*Observed){runningThree, atRevision(live), etcdRestore()},
		want:    "",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Plan(apply(observed(newCluster(3, tc.version)), tc.edits...))
			flag, annotation := replacedRevisionArg(t, d, restoreSeed)
			if flag != tc.want || annotation != tc.want {
				t.Errorf("%s: --replaced-revision=%q, annotation %q; want %q", tc.reason, flag, annotation, tc.want)
			}
		})
	}
}

// TestRestoreCommitRecordsRevisions: the commit keeps what the seed Pod
// was rendered with, whatever the members say by then, so that the seed
// rendered again restores the same; and the record's RevisionSeen moves to
// where the restored history starts, so a restore after it, even before
// any of its members was seen, starts above it.
func TestRestoreCommitRecordsRevisions(t *testing.T) {
	const rendered, snapshot = 1_000_010_800, 7_267
	seedRendered := func(o *Observed) {
		o.Pods[restoreSeed].Annotations[AnnotationReplacedRevision] = strconv.Itoa(rendered)
	}
	o := apply(observed(newCluster(3, "3.6.16")), runningThree, atRevision(rendered+4_000), etcdRestore(),
		fetchEnded(0, `{"succeeded":true,"revision":7267}`), seedRendered)
	d := Plan(o)
	rec := d.Status.Bootstrap
	if rec == nil || rec.Restore == nil || rec.SeedMember != restoreSeed {
		t.Fatalf("the fetch succeeded but the restore is not committed: %+v", rec)
	}
	want := v1beta2.BootstrapStatus{
		SeedMember: restoreSeed, RevisionSeen: 2_000_000_000,
		Restore: &v1beta2.RestoreRecord{Revision: snapshot, ReplacedRevision: rendered},
	}
	got := v1beta2.BootstrapStatus{SeedMember: rec.SeedMember, RevisionSeen: rec.RevisionSeen,
		Restore: &v1beta2.RestoreRecord{Revision: rec.Restore.Revision, ReplacedRevision: rec.Restore.ReplacedRevision}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the committed record (-want +got):\n%s", d)
	}

	// The seed is lost before it ran: rendered again from the record, with
	// the value it was first rendered with.
	again := observed(newCluster(3, "3.6.16"))
	again.Cluster.Status.Bootstrap = rec
	servicesLeft(again)
	flag, annotation := replacedRevisionArg(t, Plan(again), restoreSeed)
	if want := strconv.Itoa(rendered); flag != want || annotation != want {
		t.Errorf("the seed rendered again: --replaced-revision=%q, annotation %q; want %q", flag, annotation, want)
	}

	// A seed rendered by a hook before this flag: nothing recorded, and
	// nothing added when it is rendered again.
	o = apply(observed(newCluster(3, "3.6.16")), runningThree, atRevision(rendered), etcdRestore(),
		fetchEnded(0, `{"succeeded":true,"revision":7267}`))
	if rec := Plan(o).Status.Bootstrap; rec == nil || rec.Restore == nil || rec.Restore.ReplacedRevision != 0 || rec.RevisionSeen != 1_000_000_000 {
		t.Errorf("a seed without the annotation: record %+v; want no replaced revision, and the snapshot plus the bump seen", rec)
	}
}

// TestRevisionSeen: the record's revision only rises, in steps of a
// million, from the members, the status and the peer Service's copy.
func TestRevisionSeen(t *testing.T) {
	cases := []struct {
		name, reason    string
		status, service int64
		members         int64
		want            int64
	}{
		{"rounded down", "a million writes between changes of the record", 0, 0, 7_654_321, 7_000_000},
		{"below a step", "a young cluster's record does not change at all", 0, 0, 999_999, 0},
		{"never lowered", "members after a restore, or a stale answer, report less", 9_000_000, 9_000_000, 12_345, 9_000_000},
		{"the copy wins", "a status wiped by hand keeps what the Service's copy says", 0, 5_000_000, 0, 5_000_000},
		{"the status wins", "a Service copy whose write failed keeps what the status says", 6_000_000, 2_000_000, 0, 6_000_000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := apply(observed(newCluster(3, "3.6.16")), runningThree, atRevision(tc.members))
			status, copy := *record(firstSeed, true), *record(firstSeed, true)
			status.RevisionSeen, copy.RevisionSeen = tc.status, tc.service
			o.Cluster.Status.Bootstrap = &status
			stampedService(o, &copy)
			rec := Plan(o).Status.Bootstrap
			if rec == nil || rec.RevisionSeen != tc.want {
				t.Errorf("%s: record %+v; want RevisionSeen %d", tc.reason, rec, tc.want)
			}
		})
	}
}
