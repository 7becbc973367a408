package harness

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// Containers: starting one (the image picks a binary, podspec.go), the init
// containers in order before the app containers, and turning an exit into
// container state as the kubelet does: the exit code, the termination
// message (kubelet_termination.go), and when the container runs again.

func (w *podWorker) ctr(name string) *ctrState { return w.ctrIn(&w.ctrs, name) }

func (w *podWorker) initCtr(name string) *ctrState { return w.ctrIn(&w.inits, name) }

// ctrIn finds the container in list, or adds it.
func (w *podWorker) ctrIn(list *[]*ctrState, name string) *ctrState {
	for _, c := range *list {
		if c.name == name {
			return c
		}
	}
	c := &ctrState{name: name, run: -1}
	w.mu.Lock()
	*list = append(*list, c)
	w.mu.Unlock()
	return c
}

func (w *podWorker) sync(pod *corev1.Pod) {
	if !w.scheduled {
		if !w.schedule(pod) {
			return
		}
		// Publish the IP before any container starts: etcd resolves its
		// own peer URL at startup, and DNS answers from the Pod status.
		w.publish(pod)
	}
	if !w.syncInit(pod) {
		// As the kubelet shows them: the app containers wait for the
		// init containers.
		for i := range pod.Spec.Containers {
			c := w.ctr(pod.Spec.Containers[i].Name)
			c.spec = pod.Spec.Containers[i]
			c.waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
		}
		return
	}
	for i := range pod.Spec.Containers {
		c := w.ctr(pod.Spec.Containers[i].Name)
		c.spec = pod.Spec.Containers[i]
		if c.waiting != nil && c.waiting.Reason == "PodInitializing" {
			c.waiting = nil
		}
		w.syncContainer(pod, c)
	}
}

// syncInit runs the init containers one at a time, in order, each to a
// successful exit; one that fails is restarted with the crash-loop backoff
// (restartPolicy Always and OnFailure), or fails the Pod (Never). It
// reports whether all have succeeded.
func (w *podWorker) syncInit(pod *corev1.Pod) bool {
	if w.initialized {
		return true
	}
	for i := range pod.Spec.InitContainers {
		c := w.initCtr(pod.Spec.InitContainers[i].Name)
		c.spec = pod.Spec.InitContainers[i]
		if c.succeeded {
			continue
		}
		if c.p != nil && c.p.Exited() {
			w.recordExit(pod, c, false)
			if c.term != nil && c.term.ExitCode == 0 {
				c.succeeded, c.done = true, true
				continue
			}
		}
		if c.p == nil && !c.done && !time.Now().Before(c.nextStart) {
			w.startContainer(pod, c)
		}
		return false
	}
	w.initialized = true
	return true
}

// all is every container of the Pod, init containers first.
func (w *podWorker) all() []*ctrState {
	return append(append([]*ctrState(nil), w.inits...), w.ctrs...)
}

func (w *podWorker) configError(c *ctrState, msg string) {
	c.waiting = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: msg}
	if c.reported != msg {
		c.reported = msg
		w.k.event(w.ref, "container %s: CreateContainerConfigError: %s", c.name, msg)
	}
}

func (w *podWorker) syncContainer(pod *corev1.Pod, c *ctrState) {
	if c.p != nil && c.p.Exited() {
		w.recordExit(pod, c, false)
	}
	if c.p != nil {
		if msg := c.probes.killRequest(); msg != "" {
			w.k.event(w.ref, "container %s: %s, restarting", c.name, msg)
			w.stopContainer(pod, c, w.gracePeriod(pod))
			w.recordExit(pod, c, false)
		}
	}
	if c.p != nil && c.image != c.spec.Image {
		// In-place image update: the kubelet kills the container and
		// starts one from the new image with the same volumes.
		w.k.event(w.ref, "container %s: image changed %s -> %s, restarting", c.name, c.image, c.spec.Image)
		w.stopContainer(pod, c, w.gracePeriod(pod))
		w.recordExit(pod, c, true)
	}
	if c.p == nil && !c.done && !time.Now().Before(c.nextStart) {
		w.startContainer(pod, c)
	}
}

func (w *podWorker) startContainer(pod *corev1.Pod, c *ctrState) {
	now := time.Now()
	// A fresh writable layer for every container instance.
	rootfs := filepath.Join(w.dir, "containers", c.name, "rootfs")
	if err := os.RemoveAll(rootfs); err != nil {
		w.k.event(w.ref, "container %s: reset writable layer: %v", c.name, err)
	}
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		w.k.event(w.ref, "container %s: writable layer: %v", c.name, err)
	}
	termLog := w.termLog(c.name)
	_ = os.Remove(termLog)
	subPaths := w.secretSubPaths(c)
	pc := podContext{pod: pod, ip: w.ip, lo: w.lo, binDir: w.k.cfg.BinDir, volumes: w.volumes, subPaths: subPaths,
		home: w.dir, rootfs: rootfs, termLog: termLog}
	plan, err := planContainer(pc, &c.spec)
	switch {
	case errors.Is(err, errImagePull):
		c.pullFailures++
		reason := "ErrImagePull"
		if c.pullFailures > 1 {
			reason = "ImagePullBackOff"
		}
		c.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}
		c.nextStart = now.Add(w.k.cfg.ImagePullBackoff)
		if c.pullFailures == 1 {
			w.k.event(w.ref, "container %s: %s: %v", c.name, reason, err)
		}
		return
	case err != nil:
		w.configError(c, err.Error())
		c.nextStart = now.Add(time.Second)
		return
	}
	c.instance++
	p, err := w.k.procs.Start(testenv.ProcessSpec{
		Name:    fmt.Sprintf("%s/%s/%s#%d", pod.Namespace, pod.Name, c.name, c.instance),
		Path:    plan.Binary,
		Args:    plan.Args,
		Env:     plan.Env,
		Dir:     plan.Dir,
		LogPath: w.k.ContainerLog(pod.Namespace, pod.Name, c.name),
		OnExit:  w.poke,
		Gid:     w.k.podGroup(w.ip),
	})
	if err != nil {
		c.waiting = &corev1.ContainerStateWaiting{Reason: "RunContainerError", Message: err.Error()}
		c.nextStart = now.Add(w.k.cfg.RestartBackoffMax)
		w.k.event(w.ref, "container %s: RunContainerError: %v", c.name, err)
		return
	}
	if c.everStarted {
		c.restartCount++
	}
	c.everStarted = true
	if c.term != nil {
		c.lastTerm, c.term = c.term, nil
	}
	c.waiting, c.pullFailures, c.reported = nil, 0, ""
	// The probes' copy: refreshSecrets may add to w.volumes meanwhile, and
	// an exec sees the mounts the container started with.
	pc.volumes = maps.Clone(pc.volumes)
	c.image, c.startedAt, c.pc = c.spec.Image, now, pc
	c.run = w.k.addRun(ContainerRun{Namespace: pod.Namespace, Pod: pod.Name, PodUID: w.uid, Container: c.name,
		Instance: c.instance, Pid: p.Pid, Image: c.image, Started: now})
	w.setProc(c, p)
	w.k.event(w.ref, "container %s: started %s (pid %d) %s", c.name, filepath.Base(plan.Binary), p.Pid, strings.Join(plan.Args, " "))
	w.startProbes(pod, c)
}

func (w *podWorker) stopContainer(pod *corev1.Pod, c *ctrState, grace time.Duration) {
	if c.cancelProbes != nil {
		c.cancelProbes()
	}
	if c.p != nil {
		_ = c.p.Stop(grace)
	}
}

// recordExit turns the exit of c's process into container state and decides
// when it runs again. immediate is for restarts the kubelet caused itself.
func (w *podWorker) recordExit(pod *corev1.Pod, c *ctrState, immediate bool) {
	if c.cancelProbes != nil {
		c.cancelProbes()
	}
	p := c.p
	code := p.ExitCode()
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	finished := time.Now()
	w.k.updateRun(c.run, func(r *ContainerRun) { r.Exited = finished })
	c.term = &corev1.ContainerStateTerminated{
		ExitCode:    int32(code),
		Reason:      reason,
		StartedAt:   metav1.NewTime(c.startedAt),
		FinishedAt:  metav1.NewTime(finished),
		ContainerID: fmt.Sprintf("harness://%d", p.Pid),
	}
	if sig := p.Signaled(); sig != 0 {
		c.term.Signal = int32(sig)
	}
	c.term.Message = terminationMessage(w.termLog(c.name), c.spec.TerminationMessagePolicy, code, p.LogPath, p.LogOffset)
	w.setProc(c, nil)
	w.k.event(w.ref, "container %s: exited with code %d", c.name, code)
	restart := false
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
	case corev1.RestartPolicyOnFailure:
		restart = code != 0
	default:
		restart = true
	}
	if immediate {
		restart = true
	}
	if !restart {
		c.done = true
		return
	}
	if immediate {
		c.nextStart = finished
		return
	}
	if finished.Sub(c.startedAt) >= w.k.cfg.BackoffReset {
		c.backoff = 0
	}
	if c.backoff == 0 {
		c.nextStart = finished
		c.backoff = w.k.cfg.RestartBackoffBase
		return
	}
	c.nextStart = finished.Add(c.backoff)
	c.backoff = min(2*c.backoff, w.k.cfg.RestartBackoffMax)
}

// termLog is the host file behind a container's termination message.
func (w *podWorker) termLog(container string) string {
	return filepath.Join(w.dir, "containers", container, "termination-log")
}
