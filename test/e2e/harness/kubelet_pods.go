package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// The Pod worker: one goroutine per Pod that schedules it (its IPs and
// volumes), keeps its Secret volumes fresh and runs its graceful deletion.
// Its containers are in kubelet_containers.go, the status it publishes in
// kubelet_status.go.

// podWorker owns one Pod: its IPs, its volumes and its containers.
type podWorker struct {
	k         *Kubelet
	ref       Ref
	uid       string
	wake      chan struct{}
	dir       string
	stopGrace time.Duration // set by Kubelet.Stop under k.mu

	scheduled   bool
	unschedMsg  string
	ip, lo      netip.Addr
	volumes     map[string]string // written under mu, read by VolumeDir
	startTime   time.Time
	conds       map[corev1.PodConditionType]corev1.PodCondition
	lastStatus  string
	terminating bool

	// secrets are the Pod's Secret volumes, refreshed when nextSecretSync
	// has passed.
	secrets        []*secretVolume
	nextSecretSync time.Time

	mu   sync.Mutex // guards ctrs[*].p and inits[*].p for readers outside the worker
	ctrs []*ctrState
	// inits are the init containers, run in order to completion before
	// any of ctrs starts; initialized is set once all have succeeded.
	inits       []*ctrState
	initialized bool
}

type ctrState struct {
	name  string
	spec  corev1.Container
	p     *testenv.Process
	image string // of the running or last container

	instance     int
	run          int // index in Kubelet.runs of the current or last instance, -1 before
	startedAt    time.Time
	restartCount int32
	everStarted  bool
	waiting      *corev1.ContainerStateWaiting
	term         *corev1.ContainerStateTerminated // while not running
	lastTerm     *corev1.ContainerStateTerminated
	backoff      time.Duration
	nextStart    time.Time
	done         bool // exited and will not run again
	succeeded    bool // an init container that exited 0
	pullFailures int
	reported     string // last config error logged, to log it once

	probes       *probeState
	cancelProbes context.CancelFunc
	// pc is how the running instance was set up (its writable layer,
	// volumes and IPs): an exec probe runs in it.
	pc podContext
}

func (w *podWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *podWorker) proc(container string) *testenv.Process {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.ctrs {
		if container == "" || c.name == container {
			return c.p
		}
	}
	return nil
}

func (w *podWorker) setProc(c *ctrState, p *testenv.Process) {
	w.mu.Lock()
	c.p = p
	w.mu.Unlock()
}

func (w *podWorker) run(ctx context.Context) {
	defer w.k.wg.Done()
	defer func() {
		w.k.mu.Lock()
		delete(w.k.workers, w.uid)
		w.k.mu.Unlock()
	}()
	ticker := time.NewTicker(w.k.cfg.Tick)
	defer ticker.Stop()
	for {
		if ctx.Err() != nil {
			w.k.mu.Lock()
			grace := w.stopGrace
			w.k.mu.Unlock()
			w.stopAll(grace)
			return
		}
		obj, ok := w.k.api.Get(w.ref)
		if !ok || nestedString(obj, "metadata", "uid") != w.uid {
			// Removed behind the kubelet's back (force delete): kill now.
			w.stopAll(0)
			w.cleanup()
			return
		}
		var pod corev1.Pod
		if err := json.Unmarshal(mustJSON(obj), &pod); err != nil {
			w.k.event(w.ref, "cannot decode pod: %v", err)
			return
		}
		if pod.DeletionTimestamp != nil {
			w.terminate(&pod)
			return
		}
		w.sync(&pod)
		w.refreshSecrets(pod.Namespace)
		w.publish(&pod)
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-ticker.C:
		}
	}
}

func (w *podWorker) gracePeriod(pod *corev1.Pod) time.Duration {
	secs := int64(30)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		secs = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.DeletionGracePeriodSeconds != nil {
		secs = *pod.DeletionGracePeriodSeconds
	}
	d := time.Duration(secs) * time.Second
	if d > w.k.cfg.MaxGracePeriod {
		d = w.k.cfg.MaxGracePeriod
	}
	return d
}

// schedule binds the Pod: it needs its PVCs to exist and not be terminating,
// as the scheduler does. Then it gets its IPs and directories, and mounts
// its volumes: a claim waiting FileSystemResizePending gets its capacity.
func (w *podWorker) schedule(pod *corev1.Pod) bool {
	vols := map[string]string{}
	var secrets []*secretVolume
	var claims []Object
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.EmptyDir != nil:
			vols[v.Name] = filepath.Join(w.dir, "volumes", v.Name)
		case v.Secret != nil:
			// Written once the Pod is bound, below, and refreshed by
			// refreshSecrets.
			secrets = append(secrets, &secretVolume{name: v.Name, dir: filepath.Join(w.dir, "volumes", v.Name), src: *v.Secret})
		case v.PersistentVolumeClaim != nil:
			claim := v.PersistentVolumeClaim.ClaimName
			pvc, ok := w.k.api.Get(Ref{Type: TypePVC, Namespace: pod.Namespace, Name: claim})
			if !ok {
				w.unschedMsg = fmt.Sprintf("persistentvolumeclaim %q not found", claim)
				return false
			}
			if isTerminating(pvc) {
				w.unschedMsg = fmt.Sprintf("persistentvolumeclaim %q is being deleted", claim)
				return false
			}
			// readOnly is not enforced: the processes run as the test's
			// user, on the claim's host directory.
			vols[v.Name] = w.k.pvDir(pvc)
			claims = append(claims, pvc)
		default:
			// Left out: containers that mount it fail with
			// CreateContainerConfigError, the others run.
		}
	}
	ip, err := w.k.ips.Allocate()
	if err == nil {
		w.lo, err = w.k.ips.Allocate()
	}
	if err != nil {
		w.unschedMsg = err.Error()
		return false
	}
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		w.unschedMsg = fmt.Sprintf("pod directory: %v", err)
		return false
	}
	for name, d := range vols {
		if err := os.MkdirAll(d, 0o755); err != nil {
			w.unschedMsg = fmt.Sprintf("volume %s: %v", name, err)
			return false
		}
	}
	// A Secret volume that cannot be written (its Secret does not exist,
	// an item names a missing key) is left out: the containers that mount
	// it fail to start until a refresh writes it.
	for _, sv := range secrets {
		if w.writeSecretVolume(pod.Namespace, sv) {
			vols[sv.name] = sv.dir
		}
	}
	w.mu.Lock()
	w.volumes = vols
	w.mu.Unlock()
	w.ip, w.secrets, w.scheduled, w.unschedMsg, w.startTime = ip, secrets, true, "", time.Now()
	w.nextSecretSync = w.startTime.Add(w.k.cfg.SecretRefreshPeriod)
	w.k.event(w.ref, "scheduled: pod IP %s", ip)
	// Mounting a volume whose file system waits to grow grows it
	// (NodeExpandVolume at mount): only a new Pod gets here, a container
	// restart does not mount again.
	for _, pvc := range claims {
		ref := RefOf(pvc)
		if ok, err := finishNodeExpansion(w.k.api, ref, nestedString(pvc, "metadata", "uid")); ok {
			w.k.event(w.ref, "volume of claim %s mounted: file system grown", ref.Name)
		} else if err != nil {
			w.k.event(w.ref, "volume of claim %s: %v", ref.Name, err)
		}
	}
	return true
}

// refreshSecrets is the kubelet's periodic remount of Secret volumes: every
// SecretRefreshPeriod each one is rewritten if its Secret changed, and one
// that could not be written yet is tried again. A Secret that is gone keeps
// the files last written (unless optional, see secretPayload).
func (w *podWorker) refreshSecrets(namespace string) {
	if !w.scheduled || len(w.secrets) == 0 || time.Now().Before(w.nextSecretSync) {
		return
	}
	w.nextSecretSync = time.Now().Add(w.k.cfg.SecretRefreshPeriod)
	for _, sv := range w.secrets {
		for _, d := range sv.stale {
			if err := os.RemoveAll(d); err != nil {
				w.k.event(w.ref, "volume %s: remove %s: %v", sv.name, filepath.Base(d), err)
			}
		}
		sv.stale = nil
		mounted := sv.written
		if w.writeSecretVolume(namespace, sv) && !mounted {
			w.mu.Lock()
			w.volumes[sv.name] = sv.dir
			w.mu.Unlock()
			w.poke() // containers waiting for it can start
		}
	}
}

// writeSecretVolume writes the volume's payload if it changed and reports
// whether the volume is mounted (written at least once).
func (w *podWorker) writeSecretVolume(namespace string, sv *secretVolume) bool {
	payload, err := secretPayload(w.k.api, namespace, &sv.src)
	if err == nil && sv.written && payloadEqual(payload, sv.current) {
		return true
	}
	var stale string
	if err == nil {
		stale, err = writeAtomic(sv.dir, payload)
	}
	if err != nil {
		if msg := err.Error(); msg != sv.reported {
			sv.reported = msg
			w.k.event(w.ref, "volume %s: %v", sv.name, err)
		}
		return sv.written
	}
	if stale != "" {
		sv.stale = append(sv.stale, stale)
	}
	if sv.written {
		w.k.event(w.ref, "volume %s: secret %q changed, %d files rewritten", sv.name, sv.src.SecretName, len(payload))
	}
	sv.written, sv.current, sv.reported = true, payload, ""
	return true
}

// secretSubPaths copies what the container's subPath mounts of Secret
// volumes name, as they are now. The kubelet bind-mounts the file (or
// directory) ..data resolves to at the container's start, so such a mount
// never sees an update, until the container restarts; the copy behaves the
// same. A subPath that does not resolve keeps the plain path.
func (w *podWorker) secretSubPaths(c *ctrState) map[int]string {
	var out map[int]string
	for i, m := range c.spec.VolumeMounts {
		if m.SubPath == "" {
			continue
		}
		for _, sv := range w.secrets {
			if sv.name != m.Name || !sv.written {
				continue
			}
			src, err := filepath.EvalSymlinks(filepath.Join(sv.dir, filepath.Clean("/"+m.SubPath)))
			if err != nil {
				continue
			}
			dst := filepath.Join(w.dir, "volume-subpaths", m.Name, c.name, strconv.Itoa(i))
			err = os.RemoveAll(dst)
			if err == nil {
				err = copyTree(src, dst)
			}
			if err != nil {
				w.k.event(w.ref, "container %s: subPath %s of volume %s: %v", c.name, m.SubPath, m.Name, err)
				continue
			}
			if out == nil {
				out = map[int]string{}
			}
			out[i] = dst
		}
	}
	return out
}

// terminate runs a graceful deletion: SIGTERM, grace, SIGKILL, then the Pod
// leaves the store and its emptyDirs go.
func (w *podWorker) terminate(pod *corev1.Pod) {
	w.terminating = true
	grace := w.gracePeriod(pod)
	w.k.event(w.ref, "terminating, grace period %s", grace)
	var wg sync.WaitGroup
	for _, c := range w.all() {
		if c.cancelProbes != nil {
			c.cancelProbes()
		}
		if c.p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.p.Stop(grace)
			}()
		}
	}
	wg.Wait()
	for _, c := range w.all() {
		if c.p != nil {
			w.recordExit(pod, c, false)
		}
		c.done = true
	}
	w.publish(pod)
	if err := w.k.api.Remove(w.ref, w.uid); err != nil && !errors.Is(err, ErrNotFound) {
		w.k.event(w.ref, "remove: %v", err)
	}
	w.cleanup()
	w.k.event(w.ref, "deleted")
}

func (w *podWorker) stopAll(grace time.Duration) {
	var wg sync.WaitGroup
	for _, c := range w.all() {
		if c.cancelProbes != nil {
			c.cancelProbes()
		}
		if p := c.p; p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = p.Stop(grace)
			}()
		}
	}
	wg.Wait()
}

// cleanup removes the Pod directory with its emptyDirs; PVC directories live
// elsewhere and outlive the Pod.
func (w *podWorker) cleanup() {
	if err := os.RemoveAll(w.dir); err != nil {
		w.k.event(w.ref, "cleanup: %v", err)
	}
}
