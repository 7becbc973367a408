package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
	"github.com/etcdhook/etcd-hook/reconcile"
)

// The Nodes testPlacement makes. No kubelet runs them: the scheduler only
// needs their labels and allocatable resources, and no Pod on them starts.
var placementNodes = []string{"placement-node-a", "placement-node-b"}

// testPlacement: the member Pods the hook renders, placed by the real
// kube-scheduler on two Nodes that carry no zone label at first, as on a
// bare-metal cluster nobody labelled.
//   - spread: preferred (the default) schedules anyway, one member apart
//     at most across the nodes;
//   - spread: strict leaves every member Pending, and a sync of those Pods
//     reports MemberUnschedulable, quoting the scheduler and naming the
//     constraints;
//   - once the Nodes are labelled with zones, the strict members are
//     placed, the API server copies each Node's zone onto the Pod at
//     binding, and a sync lists every member's node and zone.
func testPlacement(t *testing.T, k *kube) {
	sched := startScheduler(t, k)
	const ns = "placement"
	k.mustKubectl(t, "", "create", "namespace", ns)
	k.mustKubectl(t, "", "create", "serviceaccount", "default", "-n", ns)
	for _, n := range placementNodes {
		makeNode(t, k, n)
	}
	hook := placementHook(t)

	preferred := createMembers(t, k, ns, "spread-preferred", nil)
	pods := waitPods(t, k, preferred, "every member scheduled", func(p corev1.Pod) bool { return p.Spec.NodeName != "" })
	perNode := map[string]int{}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
	}
	if len(perNode) != len(placementNodes) {
		t.Errorf("spread: preferred: members on %v, want them over both Nodes", perNode)
	}

	strict := createMembers(t, k, ns, "spread-strict", &v1beta2.PodPolicy{Spread: v1beta2.SpreadStrict})
	pods = waitPods(t, k, strict, "every member refused by the scheduler", func(p corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	st := syncStatus(t, hook, strict, pods)
	deg := clusterCondition(st, v1beta2.ConditionDegraded)
	if deg.Status != metav1.ConditionTrue || deg.Reason != etcdcluster.ReasonMemberUnschedulable {
		t.Errorf("spread: strict, on Nodes without zones: Degraded %s %s, want True %s: %s", deg.Status, deg.Reason, etcdcluster.ReasonMemberUnschedulable, deg.Message)
	}
	for _, part := range []string{
		"didn't match pod topology spread constraints",
		"maxSkew 1 over topology.kubernetes.io/zone (DoNotSchedule), maxSkew 1 over kubernetes.io/hostname (DoNotSchedule)",
		"spec.pod.spread: strict",
	} {
		if !strings.Contains(deg.Message, part) {
			t.Errorf("the condition does not say %q: %s", part, deg.Message)
		}
	}
	t.Logf("spread: strict, Pending: Degraded %s: %s", deg.Reason, deg.Message)

	// The scheduler is stopped while the Nodes are labelled: with one Node
	// labelled and the other not yet, the only eligible Node would take
	// every member (a Node without a constraint's key is no domain).
	stopProcess(t, sched)
	zones := map[string]string{}
	for i, n := range placementNodes {
		zones[n] = fmt.Sprintf("zone-%c", 'a'+i)
		k.mustKubectl(t, "", "label", "node", n, v1beta2.LabelTopologyZone+"="+zones[n])
	}
	startScheduler(t, k)
	pods = waitPods(t, k, strict, "every member scheduled once the Nodes have zones", func(p corev1.Pod) bool { return p.Spec.NodeName != "" })
	perNode = map[string]int{}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
	}
	if len(perNode) != len(placementNodes) {
		t.Errorf("spread: strict: members on %v, want them over both Nodes and zones, one apart at most", perNode)
	}
	st = syncStatus(t, hook, strict, pods)
	if deg := clusterCondition(st, v1beta2.ConditionDegraded); deg.Reason == etcdcluster.ReasonMemberUnschedulable {
		t.Errorf("every member is scheduled, and Degraded still says %s: %s", deg.Reason, deg.Message)
	}
	var want []v1beta2.MemberPlacement
	for _, p := range pods {
		want = append(want, v1beta2.MemberPlacement{Name: p.Name, Node: p.Spec.NodeName, Zone: zones[p.Spec.NodeName]})
	}
	if got := st.Members.Placement; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("status.members.placement = %v, want %v (each Node's zone, copied onto the Pod at binding)", got, want)
	}
	t.Logf("spread: strict, placed: %v", st.Members.Placement)

	// The CRD keeps what the hook reports: a field its schema lacked would
	// be pruned from the status Metacontroller writes.
	obj, err := json.Marshal(map[string]any{"apiVersion": v1beta2.APIVersion, "kind": v1beta2.Kind,
		"metadata": map[string]any{"name": strict.Name, "namespace": ns}, "spec": strict.Spec})
	if err != nil {
		t.Fatal(err)
	}
	k.mustKubectl(t, string(obj), "create", "-f", "-")
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		t.Fatal(err)
	}
	k.mustKubectl(t, "", "patch", "etcdcluster", strict.Name, "-n", ns, "--subresource=status", "--type=merge", "-p", string(patch))
	r := k.mustKubectl(t, "", "get", "etcdcluster", strict.Name, "-n", ns, "-o", "jsonpath={.status.members.placement}")
	var stored []v1beta2.MemberPlacement
	if err := json.Unmarshal([]byte(r.stdout), &stored); err != nil || fmt.Sprint(stored) != fmt.Sprint(want) {
		t.Errorf("status.members.placement as the API server stores it: %q (%v), want %v", r.stdout, err, want)
	}
}

// startScheduler runs kube-scheduler against the API server, without
// leader election and without serving anything of its own.
func startScheduler(t *testing.T, k *kube) *testenv.Process {
	t.Helper()
	bin := testenv.Binary(t, testenv.KubeScheduler)
	checkVersion(t, bin, testenv.PinnedVersion(t, "tools/kube", "k8s.io/kubernetes"), "--version")
	return startProcess(t, bin, []string{
		"--kubeconfig=" + k.kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	}, filepath.Join(t.TempDir(), "kube-scheduler.log"))
}

// makeNode registers a Node with room for many Pods, ready and untainted,
// and no zone label.
func makeNode(t *testing.T, k *kube, name string) {
	t.Helper()
	node := fmt.Sprintf(`{"apiVersion": "v1", "kind": "Node", "metadata": {"name": %q, "labels": {%q: %q}}}`, name, v1beta2.LabelHostname, name)
	k.mustKubectl(t, node, "create", "-f", "-")
	room := `{"cpu": "8", "memory": "16Gi", "pods": "110"}`
	status := fmt.Sprintf(`{"status": {"capacity": %s, "allocatable": %s, "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "made by the test", "lastHeartbeatTime": %q}]}}`,
		room, room, time.Now().UTC().Format(time.RFC3339))
	k.mustKubectl(t, "", "patch", "node", name, "--subresource=status", "--type=merge", "-p", status)
	// The API server taints a new Node not-ready (the TaintNodesByCondition
	// admission); the node lifecycle controller, which is not running here,
	// would lift it once the kubelet reports.
	k.mustKubectl(t, "", "taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-")
}

// createMembers creates three member Pods as the hook renders them for a
// cluster of that name and Pod policy: its seed Pod, under three member
// names.
func createMembers(t *testing.T, k *kube, ns, name string, pod *v1beta2.PodPolicy) *v1beta2.EtcdCluster {
	t.Helper()
	c := &v1beta2.EtcdCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta2.APIVersion, Kind: v1beta2.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Generation: 1},
		Spec:       v1beta2.ClusterSpec{Size: 3, Version: v1beta2.DefaultVersion, Pod: pod},
	}
	body, err := hooks.Encode(etcdcluster.Plan(&etcdcluster.Observed{Cluster: c, Now: time.Now(), FreshSuffix: "abcde"}), false)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Children []map[string]any `json:"children"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatal(err)
	}
	var seed map[string]any
	for _, child := range answer.Children {
		if child["kind"] == "Pod" {
			seed = child
		}
	}
	if seed == nil {
		t.Fatalf("%s: the hook rendered no Pod", name)
	}
	raw, _ := json.Marshal(seed)
	for i := range 3 {
		var p map[string]any
		_ = json.Unmarshal(raw, &p)
		member := fmt.Sprintf("%s-m%d", name, i)
		meta := p["metadata"].(map[string]any)
		meta["name"] = member
		meta["labels"].(map[string]any)[etcdcluster.LabelNode] = member
		p["spec"].(map[string]any)["hostname"] = member
		out, _ := json.Marshal(p)
		k.mustKubectl(t, string(out), "create", "-n", ns, "-f", "-")
	}
	return c
}

// waitPods waits, for at most a minute, until every member Pod of c is as
// asked, and returns them by name.
func waitPods(t *testing.T, k *kube, c *v1beta2.EtcdCluster, what string, ok func(corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r := k.mustKubectl(t, "", "get", "pods", "-n", c.Namespace, "-l", etcdcluster.LabelCluster+"="+c.Name, "-o", "json", "--sort-by=.metadata.name")
		var list corev1.PodList
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatal(err)
		}
		done := len(list.Items) == 3
		for _, p := range list.Items {
			done = done && ok(p)
		}
		if done {
			return list.Items
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not %s within a minute:\n%s", c.Name, what, r.stdout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// placementHook serves the hook's sync route with the real reconciler and
// no etcd: the Pods never run, so a correct hook never dials.
func placementHook(t *testing.T) string {
	r := &reconcile.Reconciler{
		Dialer:   noEtcd{},
		Recorder: nopRecorder{},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	srv := httptest.NewServer(hooks.SyncHandler(r))
	t.Cleanup(srv.Close)
	return srv.URL
}

type noEtcd struct{}

func (noEtcd) Cluster([]string, *etcdclient.ClientTLS) (etcdclient.Cluster, error) {
	return nil, errors.New("no etcd in this test")
}

type nopRecorder struct{}

func (nopRecorder) MembershipAction(membership.ActionType, string) {}

// syncStatus posts a sync request with the cluster and its observed Pods,
// as Metacontroller sends it, and returns the status the hook answers.
func syncStatus(t *testing.T, hook string, c *v1beta2.EtcdCluster, pods []corev1.Pod) v1beta2.ClusterStatus {
	t.Helper()
	children := map[string]corev1.Pod{}
	for _, p := range pods {
		children[p.Name] = p
	}
	req, err := json.Marshal(map[string]any{
		"controller": map[string]any{"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController", "metadata": map[string]any{"name": "etcd-cluster"}},
		"parent":     c,
		"children":   map[string]any{"Pod.v1": children},
		"related":    map[string]any{},
		"finalizing": false,
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(hook+"/sync", "application/json", bytes.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sync: HTTP %d: %s", resp.StatusCode, body)
	}
	var answer struct {
		Status v1beta2.ClusterStatus `json:"status"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		t.Fatal(err)
	}
	return answer.Status
}

func clusterCondition(st v1beta2.ClusterStatus, typ v1beta2.ConditionType) v1beta2.ClusterCondition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return v1beta2.ClusterCondition{}
}
