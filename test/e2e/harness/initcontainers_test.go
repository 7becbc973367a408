package harness

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// createPod stores a bare Pod, which the kubelet runs like any other.
func createPod(t *testing.T, env *Env, pod corev1.Pod) {
	t.Helper()
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	var obj Object
	if err := json.Unmarshal(mustJSON(pod), &obj); err != nil {
		t.Fatal(err)
	}
	if _, err := env.API.Create(obj); err != nil {
		t.Fatal(err)
	}
}

func podStatus(env *Env, name string) corev1.PodStatus {
	var pod corev1.Pod
	if obj, ok := env.API.Get(Ref{Type: TypePod, Namespace: ns, Name: name}); ok {
		_ = json.Unmarshal(mustJSON(obj), &pod)
	}
	return pod.Status
}

// TestInitContainers: init containers run in order, each to completion,
// before the app containers; one that fails is restarted with its exit
// code and termination message reported, and the app containers wait.
func TestInitContainers(t *testing.T) {
	requireEtcd(t, "3.6.16")
	env, _ := newEnvWithFake(t, Options{})
	const etcdImage = "quay.io/coreos/etcd:v3.6.16"

	createPod(t, env, corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "init-ok", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{
				{Name: "first", Image: etcdImage, Command: []string{"/usr/local/bin/etcdutl", "version"}},
				{Name: "second", Image: etcdImage, Command: []string{"/usr/local/bin/etcdctl", "version"}},
			},
			Containers: []corev1.Container{{Name: "app", Image: etcdImage, Command: []string{"/usr/local/bin/etcdctl", "version"}}},
		},
	})
	err := env.WaitFor(30*time.Second, "init-ok succeeded", func() (bool, string) {
		st := podStatus(env, "init-ok")
		return st.Phase == corev1.PodSucceeded, fmt.Sprintf("%+v", st)
	})
	mustWait(t, err)
	st := podStatus(env, "init-ok")
	if len(st.InitContainerStatuses) != 2 {
		t.Fatalf("init container statuses: %+v", st.InitContainerStatuses)
	}
	first, second := st.InitContainerStatuses[0].State.Terminated, st.InitContainerStatuses[1].State.Terminated
	app := st.ContainerStatuses[0].State.Terminated
	switch {
	case first == nil || second == nil || app == nil:
		t.Fatalf("not all containers ended: %+v", st)
	case first.ExitCode != 0 || first.Reason != "Completed" || second.ExitCode != 0:
		t.Errorf("init containers ended %+v, %+v; want Completed", first, second)
	case first.FinishedAt.After(second.StartedAt.Time) || second.FinishedAt.After(app.StartedAt.Time):
		t.Errorf("not in order: first ended %s, second started %s and ended %s, app started %s",
			first.FinishedAt, second.StartedAt, second.FinishedAt, app.StartedAt)
	}

	// A failing init container: this project's binary with flags it
	// refuses, which writes its reason as the termination message.
	createPod(t, env, corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "init-fails", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways,
			InitContainers: []corev1.Container{{Name: "fetch", Image: "ghcr.io/etcdhook/etcd-hook:latest",
				Command: []string{"/etcd-hook"}, Args: []string{"restore", "apply", "--result-file=/dev/termination-log"}}},
			Containers: []corev1.Container{{Name: "app", Image: etcdImage, Command: []string{"/usr/local/bin/etcdctl", "version"}}},
		},
	})
	err = env.WaitFor(30*time.Second, "init-fails restarted", func() (bool, string) {
		st := podStatus(env, "init-fails")
		return len(st.InitContainerStatuses) == 1 && st.InitContainerStatuses[0].RestartCount >= 1, fmt.Sprintf("%+v", st)
	})
	mustWait(t, err)
	st = podStatus(env, "init-fails")
	last := st.InitContainerStatuses[0].LastTerminationState.Terminated
	if last == nil {
		last = st.InitContainerStatuses[0].State.Terminated
	}
	if last == nil || last.ExitCode == 0 || !strings.Contains(last.Message, "etcdutl") {
		t.Errorf("failed init container's last termination %+v, want a non-zero exit and its message", last)
	}
	if st.Phase != corev1.PodPending || len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].State.Waiting == nil ||
		st.ContainerStatuses[0].State.Waiting.Reason != "PodInitializing" {
		t.Errorf("the app container must wait for the init containers: phase %s, %+v", st.Phase, st.ContainerStatuses)
	}
	for _, c := range st.Conditions {
		if c.Type == corev1.PodInitialized && c.Status != corev1.ConditionFalse {
			t.Errorf("Initialized is %s while an init container fails", c.Status)
		}
	}
}
