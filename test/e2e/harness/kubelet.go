package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	nodeName = "harness-node"
	hostIP   = "127.0.0.1"
)

// KubeletConfig tunes the kubelet emulator. Zero values take the defaults in
// brackets. Durations are compressed against Kubernetes' to keep tests short.
type KubeletConfig struct {
	BinDir string // where etcd-v<version> binaries live [BinDir()]
	Dir    string // root of pod, volume and log directories (required)

	// MaxGracePeriod caps terminationGracePeriodSeconds and
	// deletionGracePeriodSeconds, 30 s by default in Kubernetes [5s].
	MaxGracePeriod time.Duration
	// ProbePeriodMax caps a probe's periodSeconds (default 10 s) [1s].
	ProbePeriodMax time.Duration
	// ProbeInitialDelayMax caps initialDelaySeconds [1s].
	ProbeInitialDelayMax time.Duration
	// Restart backoff after a container exits: the first restart is
	// immediate, then Base doubling up to Max (Kubernetes: 10 s to 5 min).
	// It resets after a container ran for BackoffReset [200ms, 2s, 10s].
	RestartBackoffBase time.Duration
	RestartBackoffMax  time.Duration
	BackoffReset       time.Duration
	// ImagePullBackoff is the retry period of an image without a binary [1s].
	ImagePullBackoff time.Duration
	// Tick is how often a Pod worker looks at its Pod besides events [100ms].
	Tick time.Duration
	// SecretRefreshPeriod is how often a Pod's Secret volumes are compared
	// with their Secrets and rewritten if they changed: on a node, the
	// kubelet's sync period plus its Secret cache TTL, about a minute [1s].
	SecretRefreshPeriod time.Duration
	// Logf receives one line per notable Pod event (optional).
	Logf func(format string, args ...any)
	// PodGroups runs each Pod's containers with a primary group of their
	// own (PodGroup), by which Partition recognises the connections a Pod
	// opens. They still run as root.
	PodGroups bool
}

func (c *KubeletConfig) defaults() {
	if c.MaxGracePeriod == 0 {
		c.MaxGracePeriod = 5 * time.Second
	}
	if c.ProbePeriodMax == 0 {
		c.ProbePeriodMax = time.Second
	}
	if c.ProbeInitialDelayMax == 0 {
		c.ProbeInitialDelayMax = time.Second
	}
	if c.RestartBackoffBase == 0 {
		c.RestartBackoffBase = 200 * time.Millisecond
	}
	if c.RestartBackoffMax == 0 {
		c.RestartBackoffMax = 2 * time.Second
	}
	if c.BackoffReset == 0 {
		c.BackoffReset = 10 * time.Second
	}
	if c.ImagePullBackoff == 0 {
		c.ImagePullBackoff = time.Second
	}
	if c.Tick == 0 {
		c.Tick = 100 * time.Millisecond
	}
	if c.SecretRefreshPeriod == 0 {
		c.SecretRefreshPeriod = time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Kubelet runs every Pod of an APIServer as local processes: one worker
// goroutine per Pod, one process per container.
type Kubelet struct {
	cfg   KubeletConfig
	api   *APIServer
	procs *ProcTable
	ips   *IPAllocator

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	unsub  func()

	mu      sync.Mutex
	workers map[string]*podWorker // by Pod uid
	events  []string
	runs    []ContainerRun
	stopped bool

	fwMu sync.Mutex
	fw   *firewall // of Partition, started on first use
}

// ContainerRun is one container instance, one process from start to exit.
// Tests use it to tell the time etcd itself needs to start (Started to Ready)
// from the time the hook and Metacontroller add around it.
type ContainerRun struct {
	Namespace string
	Pod       string
	PodUID    string
	Container string
	Instance  int // 1 for the first start of the container in this Pod
	Pid       int
	Image     string
	Started   time.Time
	// Ready is when the kubelet first published the container as ready;
	// zero if it never was.
	Ready time.Time
	// Exited is zero while the process runs.
	Exited time.Time
}

// ContainerRuns returns every container instance started so far, in start
// order.
func (k *Kubelet) ContainerRuns() []ContainerRun {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]ContainerRun(nil), k.runs...)
}

// addRun records a started container instance and returns its index.
func (k *Kubelet) addRun(r ContainerRun) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.runs = append(k.runs, r)
	return len(k.runs) - 1
}

func (k *Kubelet) updateRun(i int, f func(*ContainerRun)) {
	if i < 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if i < len(k.runs) {
		f(&k.runs[i])
	}
}

// NewKubelet creates a kubelet; Start makes it run.
func NewKubelet(api *APIServer, procs *ProcTable, ips *IPAllocator, cfg KubeletConfig) (*Kubelet, error) {
	cfg.defaults()
	if cfg.Dir == "" {
		return nil, errors.New("kubelet: Dir is required")
	}
	if cfg.BinDir == "" {
		d, err := BinDir()
		if err != nil {
			return nil, fmt.Errorf("kubelet: %w", err)
		}
		cfg.BinDir = d
	}
	for _, d := range []string{"pods", "pv", "logs"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("kubelet: %w", err)
		}
	}
	return &Kubelet{cfg: cfg, api: api, procs: procs, ips: ips, workers: map[string]*podWorker{}}, nil
}

// LogDir is where container logs go, one file per container.
func (k *Kubelet) LogDir() string { return filepath.Join(k.cfg.Dir, "logs") }

// Start watches the store and runs every existing and future Pod.
func (k *Kubelet) Start(ctx context.Context) {
	k.ctx, k.cancel = context.WithCancel(ctx)
	k.unsub = k.api.Subscribe(k.onEvent)
	for _, pod := range k.api.List(TypePod, "") {
		k.ensureWorker(pod)
	}
}

// Stop ends all workers: their containers get SIGTERM, then SIGKILL after
// grace. Pods stay in the store as they were.
func (k *Kubelet) Stop(grace time.Duration) {
	k.mu.Lock()
	k.stopped = true
	k.mu.Unlock()
	if k.unsub != nil {
		k.unsub()
	}
	k.mu.Lock()
	for _, w := range k.workers {
		w.stopGrace = grace
	}
	k.mu.Unlock()
	if k.cancel != nil {
		k.cancel()
	}
	k.wg.Wait()
	k.closeFirewall()
}

func (k *Kubelet) event(ref Ref, format string, args ...any) {
	line := fmt.Sprintf("%s %s/%s: %s", time.Now().Format("15:04:05.000"), ref.Namespace, ref.Name, fmt.Sprintf(format, args...))
	k.mu.Lock()
	k.events = append(k.events, line)
	if len(k.events) > 2000 {
		k.events = k.events[len(k.events)-1000:]
	}
	k.mu.Unlock()
	k.cfg.Logf("kubelet: %s", line)
}

// Events returns the kubelet's event log, oldest first.
func (k *Kubelet) Events() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.events...)
}

func (k *Kubelet) onEvent(ev Event) {
	switch ev.Ref.Type {
	case TypePod:
		if ev.Type == Deleted {
			k.wakeUID(nestedString(ev.Object, "metadata", "uid"))
			return
		}
		k.ensureWorker(ev.Object)
	case TypePVC:
		if ev.Type == Deleted {
			// pvc-protection guarantees that no Pod uses it any more.
			_ = os.RemoveAll(k.pvDir(ev.Object))
		}
		k.wakeAll()
	}
}

func (k *Kubelet) pvDir(pvc Object) string {
	return filepath.Join(k.cfg.Dir, "pv", fmt.Sprintf("%s_%s_%s", nestedString(pvc, "metadata", "namespace"),
		nestedString(pvc, "metadata", "name"), nestedString(pvc, "metadata", "uid")))
}

// ClaimDir is the host directory behind a PersistentVolumeClaim.
func (k *Kubelet) ClaimDir(namespace, name string) (string, bool) {
	pvc, ok := k.api.Get(Ref{Type: TypePVC, Namespace: namespace, Name: name})
	if !ok {
		return "", false
	}
	return k.pvDir(pvc), true
}

func (k *Kubelet) ensureWorker(pod Object) {
	uid := nestedString(pod, "metadata", "uid")
	k.mu.Lock()
	defer k.mu.Unlock()
	if w, ok := k.workers[uid]; ok {
		w.poke()
		return
	}
	if k.stopped || k.ctx == nil || k.ctx.Err() != nil {
		return
	}
	ref := RefOf(pod)
	w := &podWorker{
		k: k, ref: ref, uid: uid, wake: make(chan struct{}, 1),
		dir:   filepath.Join(k.cfg.Dir, "pods", fmt.Sprintf("%s_%s_%s", ref.Namespace, ref.Name, uid)),
		conds: map[corev1.PodConditionType]corev1.PodCondition{},
	}
	k.workers[uid] = w
	k.wg.Add(1)
	go w.run(k.ctx)
}

func (k *Kubelet) wakeUID(uid string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if w, ok := k.workers[uid]; ok {
		w.poke()
	}
}

func (k *Kubelet) wakeAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.workers {
		w.poke()
	}
}

func (k *Kubelet) workerFor(namespace, name string) (*podWorker, error) {
	pod, ok := k.api.Get(Ref{Type: TypePod, Namespace: namespace, Name: name})
	if !ok {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, ErrNotFound)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	w, ok := k.workers[nestedString(pod, "metadata", "uid")]
	if !ok {
		return nil, fmt.Errorf("pod %s/%s has no worker: %w", namespace, name, ErrNotFound)
	}
	return w, nil
}

// Signal sends sig to a running container ("" = the first container).
func (k *Kubelet) Signal(namespace, pod, container string, sig syscall.Signal) error {
	w, err := k.workerFor(namespace, pod)
	if err != nil {
		return err
	}
	p := w.proc(container)
	if p == nil {
		return fmt.Errorf("pod %s/%s container %q is not running: %w", namespace, pod, container, ErrNotFound)
	}
	k.event(w.ref, "harness fault: signal %v to container %q (pid %d)", sig, container, p.Pid)
	return p.Signal(sig)
}

// KillContainer is kill -9 of the container's process; it restarts per
// restartPolicy.
func (k *Kubelet) KillContainer(namespace, pod, container string) error {
	return k.Signal(namespace, pod, container, syscall.SIGKILL)
}

// Pause freezes the container (SIGSTOP): the process holds its sockets but
// answers nothing, like a hung member.
func (k *Kubelet) Pause(namespace, pod, container string) error {
	return k.Signal(namespace, pod, container, syscall.SIGSTOP)
}

// Resume undoes Pause.
func (k *Kubelet) Resume(namespace, pod, container string) error {
	return k.Signal(namespace, pod, container, syscall.SIGCONT)
}

// ContainerPID returns the pid of a running container ("" = the first one).
func (k *Kubelet) ContainerPID(namespace, pod, container string) (int, error) {
	w, err := k.workerFor(namespace, pod)
	if err != nil {
		return 0, err
	}
	p := w.proc(container)
	if p == nil {
		return 0, fmt.Errorf("pod %s/%s container %q is not running: %w", namespace, pod, container, ErrNotFound)
	}
	return p.Pid, nil
}

// VolumeDir returns the host directory behind a volume of a running Pod,
// the directory its containers see at their mountPath: for a Secret volume,
// the AtomicWriter layout (..data and one symlink per key).
func (k *Kubelet) VolumeDir(namespace, pod, volume string) (string, error) {
	w, err := k.workerFor(namespace, pod)
	if err != nil {
		return "", err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.volumes[volume]
	if !ok {
		return "", fmt.Errorf("pod %s/%s volume %q is not mounted: %w", namespace, pod, volume, ErrNotFound)
	}
	return d, nil
}

// ContainerLog returns the path of a container's log file.
func (k *Kubelet) ContainerLog(namespace, pod, container string) string {
	return filepath.Join(k.LogDir(), fmt.Sprintf("%s_%s_%s.log", namespace, pod, container))
}

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
	p     *Proc
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
}

func (w *podWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *podWorker) proc(container string) *Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.ctrs {
		if container == "" || c.name == container {
			return c.p
		}
	}
	return nil
}

func (w *podWorker) setProc(c *ctrState, p *Proc) {
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
// as the scheduler does. Then it gets its IPs and directories.
func (w *podWorker) schedule(pod *corev1.Pod) bool {
	vols := map[string]string{}
	var secrets []*secretVolume
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
	plan, err := planContainer(podContext{pod: pod, ip: w.ip, lo: w.lo, binDir: w.k.cfg.BinDir, volumes: w.volumes, subPaths: subPaths,
		home: w.dir, rootfs: rootfs, termLog: termLog}, &c.spec)
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
	p, err := w.k.procs.Start(ProcSpec{
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
	c.image, c.startedAt = c.spec.Image, now
	c.run = w.k.addRun(ContainerRun{Namespace: pod.Namespace, Pod: pod.Name, PodUID: w.uid, Container: c.name,
		Instance: c.instance, Pid: p.Pid, Image: c.image, Started: now})
	w.setProc(c, p)
	w.k.event(w.ref, "container %s: started %s (pid %d) %s", c.name, filepath.Base(plan.Binary), p.Pid, strings.Join(plan.Args, " "))
	w.startProbes(pod, c)
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

func (w *podWorker) stopContainer(pod *corev1.Pod, c *ctrState, grace time.Duration) {
	if c.cancelProbes != nil {
		c.cancelProbes()
	}
	if c.p != nil {
		c.p.Stop(grace)
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
	// The termination message, at most 4096 bytes as the kubelet reads it.
	if f, err := os.Open(w.termLog(c.name)); err == nil {
		msg, _ := io.ReadAll(io.LimitReader(f, 4096))
		_ = f.Close()
		c.term.Message = string(msg)
	}
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
				c.p.Stop(grace)
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
				p.Stop(grace)
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

// termLog is the host file behind a container's termination message.
func (w *podWorker) termLog(container string) string {
	return filepath.Join(w.dir, "containers", container, "termination-log")
}
