package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

const (
	nodeName = "harness-node"
	hostIP   = "127.0.0.1"
)

// KubeletConfig tunes the kubelet emulator. Zero values take the defaults in
// brackets. Durations are compressed against Kubernetes' to keep tests short.
type KubeletConfig struct {
	BinDir string // where etcd-v<version> binaries live [testenv.FindBinDir()]
	Dir    string // root of pod, volume and log directories (required)

	// MaxGracePeriod caps terminationGracePeriodSeconds and
	// deletionGracePeriodSeconds, 30 s by default in Kubernetes [15s]. The
	// cap only shortens waits for a process that ignores SIGTERM (a frozen
	// member); it must stay above what etcd itself takes to stop cleanly.
	// With a client's watch open, etcd drains its client servers for its
	// request timeout (5 s plus two election timeouts: 7 s by default)
	// before it stops raft and logs its leadership step; a cap of 5 s
	// killed members mid-stop, which a real kubelet's 30 s never does.
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
		c.MaxGracePeriod = 15 * time.Second
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
		d, err := testenv.FindBinDir()
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
// answers nothing, like a hung member. It returns once every thread of the
// process is stopped, as the cgroup freezer behind docker pause does:
// kill(2) returns before the threads running on other cores have stopped,
// and a request sent at once could still be answered (make test's harness
// suite saw it once, on a loaded machine).
func (k *Kubelet) Pause(namespace, pod, container string) error {
	if err := k.Signal(namespace, pod, container, syscall.SIGSTOP); err != nil {
		return err
	}
	pid, err := k.ContainerPID(namespace, pod, container)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(2 * time.Second); !allThreadsStopped(pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pod %s/%s container %q: pid %d not stopped 2s after SIGSTOP", namespace, pod, container, pid)
		}
	}
	return nil
}

// allThreadsStopped: every thread of pid is in state T (stopped) or t
// (traced), as /proc/<pid>/task/<tid>/stat says.
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command, which is in parentheses and may
		// hold spaces: "<tid> (<comm>) <state> ...".
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
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
