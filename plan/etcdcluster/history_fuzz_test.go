package etcdcluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// world is a small model of what the planner's answers do to a cluster
// over many syncs: Metacontroller applies the children and writes the
// status back (or fails to), a kubelet starts Pods, and Pods are deleted.
// It knows nothing of how the status records a bootstrap, so the invariant
// it checks holds for any representation, including none at all.
type world struct {
	cluster  *v1beta2.EtcdCluster
	pods     map[string]*corev1.Pod
	services map[string]*corev1.Service
	// lineage is true when the status the next sync reads descends from a
	// sync that saw a member running: from then on the cluster may hold
	// data, and a new empty cluster under its name would hide that loss.
	lineage bool
	// everRan: some Pod has run. Until then nothing can hold data, and a
	// refusal to bootstrap would be a cluster stuck for nothing.
	everRan bool
	log     []string
}

func newWorld() *world {
	return &world{
		cluster:  newCluster(3, "3.6.16"),
		pods:     map[string]*corev1.Pod{},
		services: map[string]*corev1.Service{},
	}
}

func (w *world) observe(hideChildren bool) *Observed {
	o := observed(w.cluster)
	if hideChildren {
		return o
	}
	for n, p := range w.pods {
		o.Pods[n] = p
	}
	for n, s := range w.services {
		o.Services[n] = s
	}
	var running []*corev1.Pod
	for _, p := range o.Pods {
		if p.Status.Phase == corev1.PodRunning {
			running = append(running, p)
		}
	}
	if len(running) > 0 {
		slices.SortFunc(running, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		ms := &membership.Membership{}
		for i, p := range running {
			ms.Members = append(ms.Members, member(uint64(i+1), p.Name))
		}
		ms.LeaderID = 1
		o.Membership = ms
	} else {
		o.MembershipError = "no member Pod is running"
	}
	return o
}

// sync plans once and applies the answer as Metacontroller would: new
// children are created, observed ones missing from the answer deleted, and
// the status written unless dropStatus.
func (w *world) sync(t *testing.T, hideChildren, dropStatus bool) {
	t.Helper()
	o := w.observe(hideChildren)
	sawRunning := o.Membership != nil
	d := Plan(o)
	for _, c := range d.Children {
		if c.Kind != plan.KindPod {
			continue
		}
		if _, exists := o.Pods[c.Name]; exists {
			continue
		}
		pod, ok := c.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		if w.lineage && slices.Contains(pod.Spec.Containers[0].Command, "--initial-cluster-state=new") {
			t.Fatalf("a cluster that has run gets a new Pod %s with --initial-cluster-state=new\nhistory:\n%s\nstatus read: %s",
				c.Name, strings.Join(w.log, "\n"), statusJSON(o.Cluster.Status))
		}
	}
	if !w.everRan && conditionOf(d.Status, v1beta2.ConditionDegraded).Reason == ReasonAllMembersLost {
		t.Fatalf("AllMembersLost for a cluster whose Pods never ran\nhistory:\n%s\nstatus read: %s",
			strings.Join(w.log, "\n"), statusJSON(o.Cluster.Status))
	}
	desired := map[string]bool{}
	for _, c := range d.Children {
		desired[c.Kind+"/"+c.Name] = true
		switch obj := c.Object.(type) {
		case *corev1.Pod:
			if _, ok := w.pods[c.Name]; !ok {
				created := obj.DeepCopy()
				created.Status.Phase = corev1.PodPending
				created.CreationTimestamp = metav1.NewTime(testNow)
				w.pods[c.Name] = created
			}
		case *corev1.Service:
			w.services[c.Name] = obj.DeepCopy()
		}
	}
	for n := range o.Pods {
		if !desired[plan.KindPod+"/"+n] {
			delete(w.pods, n)
		}
	}
	w.log = append(w.log, fmt.Sprintf("sync(hide=%v, dropStatus=%v): pods %v, phase %s", hideChildren, dropStatus, podsIn(d.Children), d.Status.Phase))
	if !dropStatus {
		w.cluster.Status = d.Status
		w.lineage = w.lineage || sawRunning
	}
}

func statusJSON(st v1beta2.ClusterStatus) string {
	b, _ := json.Marshal(st)
	return string(b)
}

// FuzzBootstrapHistory drives the planner through sequences of syncs, Pod
// starts and deletions, lost status writes and an informer cache that
// shows no children, and checks the promise behind AllMembersLost: once a
// status that saw the cluster running has been written, no sync ever
// starts a new Pod with --initial-cluster-state=new. (A user wiping the
// status clears the lineage; the planner may still refuse, which is safe.)
// Nor may it refuse a cluster none of whose Pods ever ran.
func FuzzBootstrapHistory(f *testing.F) {
	// Create, start, sync, delete every Pod, sync twice: the loss is
	// reported once and then, on today's (pre-fix) planner, forgotten.
	f.Add([]byte{0, 3, 0, 4, 0, 0})
	f.Add([]byte{0, 3, 0, 0, 4, 2, 0, 0})
	f.Add([]byte{0, 3, 1, 0, 5, 0, 4, 1, 0, 0})
	f.Add([]byte{0, 2, 3, 0, 6, 4, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 40 {
			ops = ops[:40]
		}
		w := newWorld()
		for _, op := range ops {
			switch op % 7 {
			case 0:
				w.sync(t, false, false)
			case 1:
				w.sync(t, false, true)
			case 2:
				w.sync(t, true, false)
			case 3:
				for n, p := range w.pods {
					p = p.DeepCopy()
					p.Status.Phase = corev1.PodRunning
					p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
					p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", Image: p.Spec.Containers[0].Image, Ready: true,
						State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
					w.pods[n] = p
				}
				w.everRan = w.everRan || len(w.pods) > 0
				w.log = append(w.log, "kubelet: every Pod running")
			case 4:
				clear(w.pods)
				w.log = append(w.log, "every Pod deleted")
			case 5:
				for _, n := range slices.Sorted(maps.Keys(w.pods)) {
					delete(w.pods, n)
					w.log = append(w.log, "Pod "+n+" deleted")
					break
				}
			case 6:
				w.cluster.Status = v1beta2.ClusterStatus{}
				w.lineage = false
				w.log = append(w.log, "status wiped by a user")
			}
		}
	})
}
