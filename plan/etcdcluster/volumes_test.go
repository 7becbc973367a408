package etcdcluster

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// claimAt is a member claim's state: its request and capacity ("" for a
// claim not bound yet), and a condition it reports, if any.
type claimAt struct {
	requested, capacity string
	condition           corev1.PersistentVolumeClaimConditionType
}

const expandable, fixed = "expandable", "fixed"

// volumeCluster is a running cluster of ready members on claims of class
// "expandable", m0 the leader, whose spec asks for want of storage.
func volumeCluster(want string, claims ...claimAt) *Observed {
	onAfter := make([]bool, len(claims))
	for i := range onAfter {
		onAfter[i] = true
	}
	o := rolloutCluster(true, onAfter...)
	o.Cluster.Spec.Pod.PersistentVolumeClaimSpec = &corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(want)}},
	}
	yes, no := true, false
	o.StorageClasses = map[string]*storagev1.StorageClass{
		expandable: {ObjectMeta: metav1.ObjectMeta{Name: expandable}, AllowVolumeExpansion: &yes},
		fixed:      {ObjectMeta: metav1.ObjectMeta{Name: fixed}, AllowVolumeExpansion: &no},
	}
	for i, at := range claims {
		class := expandable
		c := o.PVCs[name(i)]
		c.Spec.StorageClassName = &class
		c.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(at.requested)}
		if at.capacity != "" {
			c.Status.Phase = corev1.ClaimBound
			c.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(at.capacity)}
		}
		if at.condition != "" {
			c.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{
				Type: at.condition, Status: corev1.ConditionTrue, Message: "as the resizer says",
				LastTransitionTime: metav1.Time{Time: testNow.Add(-time.Second)},
			}}
		}
	}
	return o
}

// requestedIn is each claim's storage request in the answer, by name.
func requestedIn(t *testing.T, d Decision) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range d.Children {
		if c.Kind != plan.KindPVC {
			continue
		}
		raw, err := json.Marshal(c.Object)
		if err != nil {
			t.Fatal(err)
		}
		var claim corev1.PersistentVolumeClaim
		if err := json.Unmarshal(raw, &claim); err != nil {
			t.Fatal(err)
		}
		q := claim.Spec.Resources.Requests[corev1.ResourceStorage]
		out[c.Name] = q.String()
	}
	return out
}

func TestGrowVolumes(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		want   string
		claims []claimAt
		edit   func(o *Observed)
		// grown is the claim the answer raises to want, or "".
		grown string
		// progressing and degraded are the conditions' reasons, and
		// message a part of the message of whichever is about volumes.
		progressing, degraded, message string
	}{
		{
			name: "at size", reason: "every claim has what the spec asks: nothing to do",
			want: "1Gi", claims: []claimAt{{"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			progressing: ReasonConverged, degraded: ReasonAsExpected,
		},
		{
			name: "raised", reason: "a larger request grows the first claim, and only it",
			want: "2Gi", claims: []claimAt{{"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			grown: name(0), progressing: ReasonVolumesGrowing, degraded: ReasonAsExpected, message: "claim " + name(0) + ", from 1Gi",
		},
		{
			name: "one at a time", reason: "the first claim has its request but not its capacity yet: the next waits",
			want: "2Gi", claims: []claimAt{{"2Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			progressing: ReasonVolumesGrowing, degraded: ReasonAsExpected, message: "has 1Gi of its 2Gi",
		},
		{
			name: "the next", reason: "the first claim has grown: the second grows",
			want: "2Gi", claims: []claimAt{{"2Gi", "2Gi", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			grown: name(1), progressing: ReasonVolumesGrowing, degraded: ReasonAsExpected, message: "claim " + name(1),
		},
		{
			name: "file system pending", reason: "a claim waiting for its file system holds the next one back",
			want: "2Gi", claims: []claimAt{{"2Gi", "1Gi", claimFileSystemResizePending}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			progressing: ReasonVolumesGrowing, degraded: ReasonAsExpected, message: "FileSystemResizePending",
		},
		{
			name: "not bound", reason: "the API server refuses to resize a claim not bound yet: wait for it",
			want: "2Gi", claims: []claimAt{{"1Gi", "", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			progressing: ReasonVolumesGrowing, degraded: ReasonAsExpected, message: "not bound",
		},
		{
			name: "shrink", reason: "a claim cannot shrink: refused, touching nothing",
			want: "512Mi", claims: []claimAt{{"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			progressing: ReasonConverged, degraded: ReasonVolumeChangeRefused, message: "a claim cannot shrink",
		},
		{
			name: "class without expansion", reason: "the API server would refuse the patch and fail every sync: refused in a condition instead",
			want: "2Gi", claims: []claimAt{{"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			edit: func(o *Observed) {
				class := fixed
				o.PVCs[name(0)].Spec.StorageClassName = &class
			},
			progressing: ReasonConverged, degraded: ReasonVolumeChangeRefused, message: "StorageClass fixed does not allow volume expansion",
		},
		{
			name: "no classes related", reason: "without the related StorageClasses the hook cannot know: refused, saying what is missing",
			want: "2Gi", claims: []claimAt{{"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			edit:        func(o *Observed) { o.StorageClasses = nil },
			progressing: ReasonConverged, degraded: ReasonVolumeChangeRefused, message: "Metacontroller v4.15",
		},
		{
			name: "class gone", reason: "a class that does not exist cannot grow a claim",
			want: "2Gi", claims: []claimAt{{"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			edit:        func(o *Observed) { delete(o.StorageClasses, expandable) },
			progressing: ReasonConverged, degraded: ReasonVolumeChangeRefused, message: "StorageClass expandable of claim " + name(0) + " is not found",
		},
		{
			name: "no class", reason: "a statically provisioned claim cannot grow",
			want: "2Gi", claims: []claimAt{{"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			edit:        func(o *Observed) { o.PVCs[name(0)].Spec.StorageClassName = nil },
			progressing: ReasonConverged, degraded: ReasonVolumeChangeRefused, message: "has no StorageClass",
		},
		{
			name: "resize failed", reason: "a resize error is reported, and nothing more grows",
			want: "2Gi", claims: []claimAt{{"2Gi", "1Gi", claimControllerResizeError}, {"1Gi", "1Gi", ""}, {"1Gi", "1Gi", ""}},
			progressing: ReasonConverged, degraded: ReasonVolumeResizeFailed, message: "ControllerResizeError: as the resizer says",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := volumeCluster(tc.want, tc.claims...)
			if tc.edit != nil {
				tc.edit(o)
			}
			d := Plan(o)
			wantRequested := map[string]string{}
			for i, c := range tc.claims {
				q := resource.MustParse(c.requested)
				wantRequested[name(i)] = q.String()
			}
			if tc.grown != "" {
				q := resource.MustParse(tc.want)
				wantRequested[tc.grown] = q.String()
			}
			if diff := cmp.Diff(wantRequested, requestedIn(t, d)); diff != "" {
				t.Errorf("%s: claims' requests in the answer (-want +got):\n%s", tc.reason, diff)
			}
			prog, deg := conditionOf(d.Status, v1beta2.ConditionProgressing), conditionOf(d.Status, v1beta2.ConditionDegraded)
			if prog.Reason != tc.progressing || deg.Reason != tc.degraded {
				t.Errorf("%s: Progressing %s (%s), Degraded %s (%s); want %s and %s", tc.reason, prog.Reason, prog.Message, deg.Reason, deg.Message, tc.progressing, tc.degraded)
			}
			// A refusal or a failure needs a person: kstatus's Stalled,
			// which GitOps tools stop on.
			stalled := conditionOf(d.Status, v1beta2.ConditionStalled).Status == metav1.ConditionTrue
			if want := tc.degraded != ReasonAsExpected; stalled != want {
				t.Errorf("%s: Stalled %v, want %v", tc.reason, stalled, want)
			}
			if msg := prog.Message + " " + deg.Message; tc.message != "" && !strings.Contains(msg, tc.message) {
				t.Errorf("%s: the conditions say %q, want a mention of %q", tc.reason, msg, tc.message)
			}
		})
	}
}

// TestShrinkRefusedKeepsNewClaimsAtSize: while a smaller request is
// refused, a new member's claim gets the size the others have, not the
// spec's: the refusal touches nothing, and no member is left smaller.
func TestShrinkRefusedKeepsNewClaimsAtSize(t *testing.T) {
	o := volumeCluster("512Mi", claimAt{"1Gi", "1Gi", ""}, claimAt{"1Gi", "1Gi", ""}, claimAt{"1Gi", "1Gi", ""})
	o.Cluster.Spec.Size = 4
	// The learner the previous sync added, not started yet: this answer
	// renders its Pod and claim.
	o.Membership.Members = append(o.Membership.Members, unstarted(4, name(3), true))
	d := Plan(o)
	got := requestedIn(t, d)
	if len(got) != 4 {
		t.Fatalf("claims in the answer %v, want the 3 members' and the new member's", got)
	}
	for name, size := range got {
		if size != "1Gi" {
			t.Errorf("claim %s requests %s, want 1Gi (the existing claims' size)", name, size)
		}
	}
}

func TestRemountAfterFilesystemResizePending(t *testing.T) {
	tests := []struct {
		name     string
		reason   string
		pending  time.Duration // how long the claim has waited
		podAfter bool          // the Pod was created after the wait began
		dropped  bool
	}{
		{"within the grace", "the kubelet may still grow the mounted volume: the Pod stays", time.Minute, false, false},
		{"past the grace", "only a new Pod mounts the volume again: the member's Pod is rolled", 3 * time.Minute, false, true},
		{"a Pod newer than the wait", "the Pod mounted the volume after the resize began: a restart would change nothing", 3 * time.Minute, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := volumeCluster("2Gi", claimAt{"2Gi", "2Gi", ""}, claimAt{"2Gi", "1Gi", claimFileSystemResizePending}, claimAt{"1Gi", "1Gi", ""})
			began := testNow.Add(-tc.pending)
			o.PVCs[name(1)].Status.Conditions[0].LastTransitionTime = metav1.Time{Time: began}
			created := began.Add(-time.Hour)
			if tc.podAfter {
				created = began.Add(time.Second)
			}
			o.Pods[name(1)].CreationTimestamp = metav1.Time{Time: created}
			d := Plan(o)
			dropped := renderedPod(d.Children, name(1)) == nil && !containsChild(d.Children, plan.KindPod, name(1))
			if dropped != tc.dropped {
				t.Errorf("%s: member %s's Pod dropped %v, want %v (Progressing: %s)", tc.reason, name(1), dropped, tc.dropped, conditionOf(d.Status, v1beta2.ConditionProgressing).Message)
			}
			if prog := conditionOf(d.Status, v1beta2.ConditionProgressing); tc.dropped && !strings.Contains(prog.Message, "mounting a grown volume again") {
				t.Errorf("Progressing says %q, want it to say why the member restarts", prog.Message)
			}
		})
	}
}

func containsChild(cs []plan.Child, kind, name string) bool {
	for _, c := range cs {
		if c.Kind == kind && c.Name == name {
			return true
		}
	}
	return false
}

// TestStorageStatus: status.storage follows the claims, and the smallest
// capacity is what every member can hold.
func TestStorageStatus(t *testing.T) {
	o := volumeCluster("2Gi", claimAt{"2Gi", "2Gi", ""}, claimAt{"2Gi", "1Gi", claimFileSystemResizePending}, claimAt{"1Gi", "1Gi", ""})
	got := Plan(o).Status.Storage
	want := &v1beta2.StorageStatus{Requested: "2Gi", Capacity: "1Gi", Claims: []v1beta2.ClaimStatus{
		{Name: name(0), Requested: "2Gi", Capacity: "2Gi"},
		{Name: name(1), Requested: "2Gi", Capacity: "1Gi", Resizing: "waits for its file system to grow (FileSystemResizePending)"},
		{Name: name(2), Requested: "1Gi", Capacity: "1Gi"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status.storage (-want +got):\n%s", diff)
	}
}
