package harness

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Pod status the kubelet publishes: phase, conditions, and for each
// container its state and readiness (from its probes, probes.go).

func (w *podWorker) setCond(t corev1.PodConditionType, ok bool, reason, msg string) {
	st := corev1.ConditionFalse
	if ok {
		st = corev1.ConditionTrue
	}
	old, had := w.conds[t]
	c := corev1.PodCondition{Type: t, Status: st, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(time.Now())}
	if had && old.Status == st {
		c.LastTransitionTime = old.LastTransitionTime
	}
	w.conds[t] = c
}

// publish writes the Pod status if it changed.
func (w *podWorker) publish(pod *corev1.Pod) {
	st := corev1.PodStatus{Phase: corev1.PodPending, QOSClass: qosClass(pod)}
	order := []corev1.PodConditionType{corev1.PodScheduled}
	var readyRuns []int
	if !w.scheduled {
		w.setCond(corev1.PodScheduled, false, "Unschedulable", w.unschedMsg)
	} else {
		w.setCond(corev1.PodScheduled, true, "", "")
		st.HostIP, st.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
		st.PodIP, st.PodIPs = w.ip.String(), []corev1.PodIP{{IP: w.ip.String()}}
		start := metav1.NewTime(w.startTime)
		st.StartTime = &start
		allReady, allStarted, allDone, anyFailed := true, true, true, false
		for _, c := range w.ctrs {
			cs, ready := w.containerStatus(c)
			st.ContainerStatuses = append(st.ContainerStatuses, cs)
			if ready {
				readyRuns = append(readyRuns, c.run)
			}
			allReady = allReady && ready
			allStarted = allStarted && c.everStarted
			allDone = allDone && c.done
			if c.done && c.term != nil && c.term.ExitCode != 0 {
				anyFailed = true
			}
		}
		allReady = allReady && len(w.ctrs) > 0 && !w.terminating
		initFailed := false
		for _, c := range w.inits {
			cs, _ := w.containerStatus(c)
			cs.Ready = false // an init container is never Ready
			st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
			if c.done && !c.succeeded {
				initFailed = true
			}
		}
		if !w.initialized {
			allStarted, allDone = false, initFailed
			anyFailed = anyFailed || initFailed
		}
		switch {
		case initFailed && !w.terminating:
			st.Phase = corev1.PodFailed
		case allDone && len(w.ctrs) > 0 && anyFailed:
			st.Phase = corev1.PodFailed
		case allDone && len(w.ctrs) > 0:
			st.Phase = corev1.PodSucceeded
		case allStarted && len(w.ctrs) > 0:
			st.Phase = corev1.PodRunning
		}
		notReady := ""
		if !allReady {
			notReady = "ContainersNotReady"
		}
		w.setCond(corev1.PodReadyToStartContainers, true, "", "")
		if w.initialized || len(pod.Spec.InitContainers) == 0 {
			w.setCond(corev1.PodInitialized, true, "", "")
		} else {
			w.setCond(corev1.PodInitialized, false, "ContainersNotInitialized", "containers with incomplete status: init containers not done")
		}
		w.setCond(corev1.PodReady, allReady, notReady, "")
		w.setCond(corev1.ContainersReady, allReady, notReady, "")
		order = []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled}
	}
	for _, t := range order {
		st.Conditions = append(st.Conditions, w.conds[t])
	}
	data := string(mustJSON(st))
	if data == w.lastStatus {
		return
	}
	if _, err := w.k.api.UpdateStatus(w.ref, w.uid, st); err != nil {
		if !errors.Is(err, ErrNotFound) {
			w.k.event(w.ref, "status update: %v", err)
		}
		return
	}
	w.lastStatus = data
	// Ready counts from the status write, the moment Metacontroller and
	// the hook can see it, not from the probe's success.
	now := time.Now()
	for _, i := range readyRuns {
		w.k.updateRun(i, func(r *ContainerRun) {
			if r.Ready.IsZero() {
				r.Ready = now
			}
		})
	}
}

func (w *podWorker) containerStatus(c *ctrState) (corev1.ContainerStatus, bool) {
	image := c.spec.Image
	if c.p != nil {
		image = c.image
	}
	cs := corev1.ContainerStatus{
		Name:         c.name,
		Image:        image,
		ImageID:      "harness://" + image,
		RestartCount: c.restartCount,
	}
	if c.lastTerm != nil {
		cs.LastTerminationState.Terminated = c.lastTerm.DeepCopy()
	}
	ready := false
	switch {
	case c.p != nil:
		started := c.probes.isStarted()
		ready = started && c.probes.isReady() && !w.terminating
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt)}
		cs.Started = &started
		cs.ContainerID = fmt.Sprintf("harness://%d", c.p.Pid)
	case c.term != nil && !c.done && c.waiting == nil && time.Now().Before(c.nextStart):
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off restarting failed container %s", c.name)}
		cs.LastTerminationState.Terminated = c.term.DeepCopy()
		cs.Started = new(bool)
	case c.term != nil && c.waiting == nil:
		cs.State.Terminated = c.term.DeepCopy()
		cs.ContainerID = c.term.ContainerID
		cs.Started = new(bool)
	default:
		w := c.waiting
		if w == nil {
			w = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		cs.State.Waiting = w.DeepCopy()
		if c.term != nil {
			cs.LastTerminationState.Terminated = c.term.DeepCopy()
		}
		cs.Started = new(bool)
	}
	cs.Ready = ready
	return cs, ready
}

func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	for _, c := range pod.Spec.Containers {
		if len(c.Resources.Requests) > 0 || len(c.Resources.Limits) > 0 {
			return corev1.PodQOSBurstable
		}
	}
	return corev1.PodQOSBestEffort
}
