package etcdcluster

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// Builders for planner inputs. A test reads as the situation it sets up.

var testNow = time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)

const (
	testCluster = "demo"
	testNS      = "prod"
	testUID     = "0b5c6f8e-1111-2222-3333-444455556666"
)

// testAddresses are the plain cluster's, as newCluster makes it.
var testAddresses = plan.AddressesOf(newCluster(3, ""))

func newCluster(size int, version string) *v1beta2.EtcdCluster {
	return &v1beta2.EtcdCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta2.APIVersion, Kind: v1beta2.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: testCluster, Namespace: testNS, UID: testUID, Generation: 1},
		Spec:       v1beta2.ClusterSpec{Size: size, Version: version},
	}
}

func observed(c *v1beta2.EtcdCluster, pods ...*corev1.Pod) *Observed {
	o := &Observed{
		Cluster:     c,
		Pods:        map[string]*corev1.Pod{},
		Services:    map[string]*corev1.Service{},
		PVCs:        map[string]*corev1.PersistentVolumeClaim{},
		Now:         testNow,
		FreshSuffix: "fresh",
	}
	for _, p := range pods {
		o.Pods[p.Name] = p
	}
	return o
}

// memberPod is a member's Pod as Metacontroller would report it after
// creating it from the hook's answer: with its last applied configuration.
func memberPod(name string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	applied, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": testNS},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "etcd", "image": "quay.io/coreos/etcd:v3.6.16"}}},
	})
	readiness := corev1.ConditionFalse
	if ready {
		readiness = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: testNS,
			CreationTimestamp: metav1.NewTime(testNow.Add(-time.Minute)),
			Annotations:       map[string]string{plan.LastAppliedAnnotation: string(applied)},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.6.16"}},
			Volumes:    []corev1.Volume{{Name: dataVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
		Status: corev1.PodStatus{
			Phase:             phase,
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: readiness}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.6.16", Ready: ready}},
		},
	}
}

func readyPod(name string) *corev1.Pod { return memberPod(name, corev1.PodRunning, true) }

// member is a started voter that answered this sync.
func member(id uint64, name string) membership.Member {
	return membership.Member{
		ID: id, Name: name,
		PeerURLs:  []string{testAddresses.PeerURL(name)},
		Reachable: true, Version: "3.6.16", RaftIndex: 100,
	}
}

func learner(id uint64, name string, raftIndex uint64) membership.Member {
	m := member(id, name)
	m.IsLearner, m.RaftIndex = true, raftIndex
	return m
}

// unstarted is a member that was added but has not run yet: etcd lists it
// without a name.
func unstarted(id uint64, name string, isLearner bool) membership.Member {
	return membership.Member{ID: id, PeerURLs: []string{testAddresses.PeerURL(name)}, IsLearner: isLearner}
}

func down(m membership.Member) membership.Member {
	m.Reachable, m.Version, m.RaftIndex = false, "", 0
	return m
}

func memberList(leader uint64, members ...membership.Member) *membership.Membership {
	return &membership.Membership{Members: members, LeaderID: leader}
}

func name(i int) string { return fmt.Sprintf("%s-m%d", testCluster, i) }

// childNames lists the answer as "Kind/name".
func childNames(cs []plan.Child) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Kind+"/"+c.Name)
	}
	return out
}

func podsIn(cs []plan.Child) []string { return childrenOf(cs, plan.KindPod) }

// childrenOf names the children of one kind, in answer order.
func childrenOf(cs []plan.Child, kind string) []string {
	var out []string
	for _, c := range cs {
		if c.Kind == kind {
			out = append(out, c.Name)
		}
	}
	return out
}

func renderedPod(cs []plan.Child, name string) *corev1.Pod {
	for _, c := range cs {
		if p, ok := c.Object.(*corev1.Pod); ok && c.Name == name {
			return p
		}
	}
	return nil
}

func conditionOf(st v1beta2.ClusterStatus, t v1beta2.ConditionType) v1beta2.ClusterCondition {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1beta2.ClusterCondition{}
}
