package sync

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// TestEveryPodDeletedFromARunningCluster replays the sequence of issue 16
// with each status fed back as Metacontroller does: a converged cluster of
// three on emptyDir, every Pod deleted at once (terminating, etcd down),
// then gone. Before the bootstrap record, the status reported the loss
// once and then forgot it, and the third sync started a new seed.
func TestEveryPodDeletedFromARunningCluster(t *testing.T) {
	c := newCluster(3, "3.6.16")
	pods := []*corev1.Pod{readyPod(name(0)), readyPod(name(1)), readyPod(name(2))}
	o := observed(c, pods...)
	o.Services[testCluster] = peerService(c, nil)
	o.Services[ClientServiceName(testCluster)] = clientService(c, true)
	o.Membership = membership(1, member(1, name(0)), member(2, name(1)), member(3, name(2)))
	d := Plan(o)
	if d.Status.Phase != v1beta2.PhaseRunning {
		t.Fatalf("setup: phase %s", d.Status.Phase)
	}
	services := o.Services
	c.Status = d.Status

	// Deleted: the Pods terminate, etcd no longer answers.
	o = observed(c)
	o.Services = services
	for _, p := range pods {
		p = p.DeepCopy()
		p.DeletionTimestamp = &metav1.Time{Time: testNow}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		o.Pods[p.Name] = p
	}
	o.MembershipError = "context deadline exceeded"
	d = Plan(o)
	c.Status = d.Status

	// Gone, and several syncs later still gone.
	for i := range 3 {
		o = observed(c)
		o.Services = services
		o.Now = testNow.Add(time.Duration(i+1) * 5 * time.Second)
		o.MembershipError = "no member Pod is running"
		d = Plan(o)
		for _, ch := range d.Children {
			if pod, ok := ch.Object.(*corev1.Pod); ok && slices.Contains(pod.Spec.Containers[0].Command, "--initial-cluster-state=new") {
				t.Fatalf("sync %d after the loss starts a new cluster with Pod %s; status read: phase %s, size %d", i+1, ch.Name, c.Status.Phase, c.Status.Size)
			}
		}
		if deg := conditionOf(d.Status, v1beta2.ConditionDegraded); deg.Reason != ReasonAllMembersLost || d.Status.Phase != v1beta2.PhaseFailed {
			t.Fatalf("sync %d after the loss: phase %s, Degraded %s/%s", i+1, d.Status.Phase, deg.Status, deg.Reason)
		}
		c.Status = d.Status
	}
}
