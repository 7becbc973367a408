package apiserver

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// testClaimGrowth: what the hook relies on to grow member claims, on the
// real API server and its default admission plugins.
//   - A bound claim of a class with allowVolumeExpansion takes the claim
//     the hook answers with a raised request, applied as Metacontroller
//     applies a child in place.
//   - For a claim of a class without it, the hook changes nothing and
//     reports VolumeChangeRefused; the API server would indeed refuse the
//     patch (the PersistentVolumeClaimResize admission plugin), which as a
//     child update would fail every sync of the cluster.
//   - A smaller request is refused by the API server too, and by the hook.
//
// No controller manager runs: each claim is bound by hand, to a volume
// made for it, as the volume binder would.
func testClaimGrowth(t *testing.T, k *kube) {
	const ns = "claim-growth"
	k.mustKubectl(t, "", "create", "namespace", ns)
	k.mustKubectl(t, "", "create", "serviceaccount", "default", "-n", ns)
	for _, class := range []string{"growable", "fixed"} {
		sc := map[string]any{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
			"metadata": map[string]any{"name": "claim-growth-" + class}, "provisioner": "example.com/" + class}
		if class == "growable" {
			sc["allowVolumeExpansion"] = true
		}
		k.mustKubectl(t, string(mustJSON(t, sc)), "create", "-f", "-")
	}
	classes := map[string]*storagev1.StorageClass{}
	var list storagev1.StorageClassList
	unmarshal(t, k.mustKubectl(t, "", "get", "storageclasses", "-o", "json").stdout, &list)
	for i := range list.Items {
		classes[list.Items[i].Name] = &list.Items[i]
	}

	grow := growthCluster(t, k, ns, "growable")
	grown := claimInAnswer(t, etcdcluster.Plan(grow.observed(classes)), grow.member)
	if got := storageOf(grown); got != "2Gi" {
		t.Fatalf("growable: the hook answers the claim with %s, want 2Gi", got)
	}
	// Admission reads StorageClasses from its informer, a moment behind.
	var applied result
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		applied = k.kubectl(t, string(mustJSON(t, grown)), "apply", "-n", ns, "-f", "-")
		if applied.code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if applied.code != 0 {
		t.Fatalf("growable: the API server refused the hook's grown claim:\n%s", applied)
	}
	if got := storageOf(grow.stored(t, k)); got != "2Gi" {
		t.Errorf("growable: the stored claim requests %s, want 2Gi", got)
	}

	fixed := growthCluster(t, k, ns, "fixed")
	d := etcdcluster.Plan(fixed.observed(classes))
	if got := storageOf(claimInAnswer(t, d, fixed.member)); got != "1Gi" {
		t.Errorf("fixed: the hook answers the claim with %s, want it unchanged at 1Gi", got)
	}
	if c := condition(d.Status, v1beta2.ConditionDegraded); c.Reason != etcdcluster.ReasonVolumeChangeRefused || !strings.Contains(c.Message, "does not allow volume expansion") {
		t.Errorf("fixed: Degraded %s: %s; want VolumeChangeRefused naming the class", c.Reason, c.Message)
	}
	r := k.kubectl(t, "", "patch", "pvc", fixed.member, "-n", ns, "--type=merge", "-p", `{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
	if r.code == 0 || !strings.Contains(r.stderr, "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize") {
		t.Errorf("fixed: the API server's answer to a larger request (want the resize admission's refusal):\n%s", r)
	}

	r = k.kubectl(t, "", "patch", "pvc", grow.member, "-n", ns, "--type=merge", "-p", `{"spec":{"resources":{"requests":{"storage":"512Mi"}}}}`)
	if r.code == 0 || !strings.Contains(r.stderr, "spec.resources.requests.storage") {
		t.Errorf("a smaller request (want it refused):\n%s", r)
	}
	shrink := growthCluster(t, k, ns, "growable")
	shrink.want = "512Mi"
	d = etcdcluster.Plan(shrink.observed(classes))
	if c := condition(d.Status, v1beta2.ConditionDegraded); c.Reason != etcdcluster.ReasonVolumeChangeRefused || storageOf(claimInAnswer(t, d, shrink.member)) != "1Gi" {
		t.Errorf("shrink: Degraded %s: %s, claim %s; want VolumeChangeRefused and the claim unchanged", c.Reason, c.Message, storageOf(claimInAnswer(t, d, shrink.member)))
	}
}

// growthCase is a running one-member cluster on a claim of a class, as
// the API server holds it, asked to grow to want.
type growthCase struct {
	cluster *v1beta2.EtcdCluster
	member  string
	pod     *corev1.Pod
	claim   *corev1.PersistentVolumeClaim
	ns      string
	want    string
}

// growthCluster renders a new cluster's seed Pod and claim with the hook,
// creates the claim (bound by hand to a volume of its own) and returns
// the case with the claim as stored. The Pod is not created: the planner
// needs it observed, not run.
func growthCluster(t *testing.T, k *kube, ns, class string) *growthCase {
	t.Helper()
	name := fmt.Sprintf("%s-%d", class, time.Now().UnixNano()%100000)
	storageClass := "claim-growth-" + class
	c := &v1beta2.EtcdCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta2.APIVersion, Kind: v1beta2.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1},
		Spec: v1beta2.ClusterSpec{Size: 1, Version: v1beta2.DefaultVersion, Pod: &v1beta2.PodPolicy{
			PersistentVolumeClaimSpec: &corev1.PersistentVolumeClaimSpec{
				StorageClassName: &storageClass,
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}},
	}
	body, err := hooks.Encode(etcdcluster.Plan(&etcdcluster.Observed{Cluster: c, Now: time.Now(), FreshSuffix: "abcde"}), false)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Children []json.RawMessage `json:"children"`
	}
	unmarshal(t, string(body), &answer)
	gc := &growthCase{cluster: c, ns: ns, want: "2Gi"}
	for _, child := range answer.Children {
		var meta struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		unmarshal(t, string(child), &meta)
		switch meta.Kind {
		case "Pod":
			gc.pod = &corev1.Pod{}
			unmarshal(t, string(child), gc.pod)
		case "PersistentVolumeClaim":
			gc.member = meta.Metadata.Name
			// As Metacontroller creates a child: with what it applied.
			var obj map[string]any
			unmarshal(t, string(child), &obj)
			obj["metadata"].(map[string]any)["annotations"].(map[string]any)[plan.LastAppliedAnnotation] = string(child)
			k.mustKubectl(t, string(mustJSON(t, obj)), "create", "-n", ns, "-f", "-")
		}
	}
	if gc.pod == nil || gc.member == "" {
		t.Fatalf("%s: the hook rendered no seed Pod and claim", name)
	}
	pv := map[string]any{"apiVersion": "v1", "kind": "PersistentVolume", "metadata": map[string]any{"name": "pv-" + gc.member},
		"spec": map[string]any{
			"capacity": map[string]any{"storage": "1Gi"}, "accessModes": []string{"ReadWriteOnce"}, "storageClassName": storageClass,
			"hostPath": map[string]any{"path": "/tmp/" + gc.member}, "claimRef": map[string]any{"namespace": ns, "name": gc.member},
		}}
	k.mustKubectl(t, string(mustJSON(t, pv)), "create", "-f", "-")
	k.mustKubectl(t, "", "patch", "pvc", gc.member, "-n", ns, "--subresource=status", "--type=merge", "-p",
		`{"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"1Gi"}}}`)
	gc.claim = gc.stored(t, k)
	return gc
}

func (gc *growthCase) stored(t *testing.T, k *kube) *corev1.PersistentVolumeClaim {
	t.Helper()
	var claim corev1.PersistentVolumeClaim
	unmarshal(t, k.mustKubectl(t, "", "get", "pvc", gc.member, "-n", gc.ns, "-o", "json").stdout, &claim)
	return &claim
}

// observed is a sync of the cluster running on its claim, its one member
// ready and leading, asking for want.
func (gc *growthCase) observed(classes map[string]*storagev1.StorageClass) *etcdcluster.Observed {
	// A copy whose claim spec asks for want (the types have no DeepCopy).
	c := *gc.cluster
	pol := *c.Spec.Pod
	claim := *pol.PersistentVolumeClaimSpec.DeepCopy()
	claim.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(gc.want)
	pol.PersistentVolumeClaimSpec = &claim
	c.Spec.Pod = &pol
	c.Status.Phase = v1beta2.PhaseRunning
	c.Status.CurrentVersion = c.Spec.Version
	pod := gc.pod.DeepCopy()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	return &etcdcluster.Observed{
		Cluster: &c, Now: time.Now(), FreshSuffix: "fghij",
		Pods:           map[string]*corev1.Pod{gc.member: pod},
		PVCs:           map[string]*corev1.PersistentVolumeClaim{gc.member: gc.claim},
		StorageClasses: classes,
		Membership: &membership.Membership{LeaderID: 1, Members: []membership.Member{{
			ID: 1, Name: gc.member, Reachable: true, Version: c.Spec.Version, RaftIndex: 10,
			PeerURLs: []string{plan.AddressesOf(&c).PeerURL(gc.member)}, ClientURLs: []string{plan.AddressesOf(&c).ClientURL(gc.member)},
		}}},
	}
}

func claimInAnswer(t *testing.T, d etcdcluster.Decision, name string) map[string]any {
	t.Helper()
	for _, c := range d.Children {
		if c.Kind == plan.KindPVC && c.Name == name {
			var obj map[string]any
			unmarshal(t, string(mustJSON(t, c.Object)), &obj)
			return obj
		}
	}
	t.Fatalf("no claim %s in the answer", name)
	return nil
}

func storageOf(obj any) string {
	var claim corev1.PersistentVolumeClaim
	raw, _ := json.Marshal(obj)
	_ = json.Unmarshal(raw, &claim)
	q := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	return q.String()
}

func condition(st v1beta2.ClusterStatus, typ v1beta2.ConditionType) v1beta2.ClusterCondition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return v1beta2.ClusterCondition{}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
