package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Volume expansion, as the CSI external-resizer (the controller side) and
// the kubelet (the node side) carry it out with RecoverVolumeExpansionFailure
// on (Kubernetes 1.33+): a bound claim whose storage request exceeds its
// capacity is marked Resizing with the new size in
// status.allocatedResources; the driver grows the volume, which takes
// VolumeConfig.ResizeDelay; then either the claim has its new capacity, or
// it waits FileSystemResizePending for its file system to grow on a node.
// The kubelet's part is here too for mounted volumes of online classes;
// the part that needs a new mount is the kubelet's (Kubelet, schedule).

// The allocatedResourceStatuses values the resizers write.
const (
	resizeControllerInProgress = string(corev1.PersistentVolumeClaimControllerResizeInProgress)
	resizeNodePending          = string(corev1.PersistentVolumeClaimNodeResizePending)
	fsResizePendingMessage     = "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
)

// VolumeConfig tunes the VolumeController. Zero values take the defaults in
// brackets.
type VolumeConfig struct {
	// ResizeDelay is how long the driver takes to grow a volume once the
	// resizer has started (ControllerExpandVolume) [300ms].
	ResizeDelay time.Duration
	// Logf receives one line per resize step (optional).
	Logf func(format string, args ...any)
}

// VolumeController grows the volumes of claims whose request was raised.
// One goroutine, woken by claim and Pod events and by its own deadlines.
type VolumeController struct {
	cfg   VolumeConfig
	api   *APIServer
	wake  chan struct{}
	unsub func()

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	due    map[string]time.Time // claim uid -> end of its controller-side expansion
	events []string
}

// NewVolumeController creates the controller; Start makes it run.
func NewVolumeController(api *APIServer, cfg VolumeConfig) *VolumeController {
	if cfg.ResizeDelay == 0 {
		cfg.ResizeDelay = 300 * time.Millisecond
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &VolumeController{cfg: cfg, api: api, wake: make(chan struct{}, 1), due: map[string]time.Time{}}
}

// Start watches claims and Pods.
func (vc *VolumeController) Start(ctx context.Context) {
	vc.ctx, vc.cancel = context.WithCancel(ctx)
	vc.unsub = vc.api.Subscribe(func(ev Event) {
		if ev.Ref.Type == TypePVC || ev.Ref.Type == TypePod {
			vc.poke()
		}
	})
	vc.wg.Add(1)
	go vc.run()
	vc.poke()
}

// Stop ends the controller; a resize under way stays as it is.
func (vc *VolumeController) Stop() {
	if vc.unsub != nil {
		vc.unsub()
	}
	if vc.cancel != nil {
		vc.cancel()
	}
	vc.wg.Wait()
}

// Events returns the resize steps taken, oldest first.
func (vc *VolumeController) Events() []string {
	vc.mu.Lock()
	defer vc.mu.Unlock()
	return append([]string(nil), vc.events...)
}

func (vc *VolumeController) event(ref Ref, format string, args ...any) {
	line := fmt.Sprintf("%s %s/%s: %s", time.Now().Format("15:04:05.000"), ref.Namespace, ref.Name, fmt.Sprintf(format, args...))
	vc.mu.Lock()
	vc.events = append(vc.events, line)
	if len(vc.events) > 1000 {
		vc.events = vc.events[len(vc.events)-500:]
	}
	vc.mu.Unlock()
	vc.cfg.Logf("volumes: %s", line)
}

func (vc *VolumeController) poke() {
	select {
	case vc.wake <- struct{}{}:
	default:
	}
}

func (vc *VolumeController) run() {
	defer vc.wg.Done()
	for {
		next := vc.reconcile(time.Now())
		var timer *time.Timer
		var fire <-chan time.Time
		if !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			fire = timer.C
		}
		select {
		case <-vc.ctx.Done():
		case <-vc.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if vc.ctx.Err() != nil {
			return
		}
	}
}

// reconcile takes every step that is due and returns when the next one
// will be (zero: none planned).
func (vc *VolumeController) reconcile(now time.Time) time.Time {
	var podList []Object
	pods := func() []Object {
		if podList == nil {
			podList = vc.api.List(TypePod, "")
		}
		return podList
	}
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	seen := map[string]bool{}
	for _, pvc := range vc.api.List(TypePVC, "") {
		ref, uid := RefOf(pvc), nestedString(pvc, "metadata", "uid")
		seen[uid] = true
		switch {
		case resizeState(pvc) == resizeControllerInProgress:
			vc.mu.Lock()
			due, ok := vc.due[uid]
			if !ok {
				due = now.Add(vc.cfg.ResizeDelay)
				vc.due[uid] = due
			}
			vc.mu.Unlock()
			if now.Before(due) {
				later(due)
				continue
			}
			vc.mu.Lock()
			delete(vc.due, uid)
			vc.mu.Unlock()
			vc.finishControllerResize(ref, uid, vc.offline(pvc), pods())
		case needsResize(pvc):
			if vc.startResize(ref, uid) {
				vc.mu.Lock()
				due := now.Add(vc.cfg.ResizeDelay)
				vc.due[uid] = due
				vc.mu.Unlock()
				later(due)
			}
		case resizeState(pvc) == resizeNodePending && !vc.offline(pvc):
			// The kubelet grows a mounted volume of an online driver.
			if mounted, _ := claimMounts(pods(), ref.Namespace, ref.Name); mounted {
				if ok, _ := finishNodeExpansion(vc.api, ref, uid); ok {
					vc.event(ref, "file system grown online in a running Pod")
				}
			}
		}
	}
	vc.mu.Lock()
	for uid := range vc.due {
		if !seen[uid] {
			delete(vc.due, uid)
		}
	}
	vc.mu.Unlock()
	return next
}

func resizeState(pvc Object) string {
	return nestedString(pvc, "status", "allocatedResourceStatuses", "storage")
}

// needsResize: a bound claim asks for more than its capacity, and for a
// size the resizer has not started on.
func needsResize(pvc Object) bool {
	if nestedString(pvc, "status", "phase") != string(corev1.ClaimBound) {
		return false
	}
	req, capacity, allocated := claimStorage(pvc)
	return req.Cmp(capacity) > 0 && (allocated.IsZero() || req.Cmp(allocated) != 0)
}

// offline tells a claim whose class's driver grows file systems only at
// mount time; a claim of a missing class counts as online. Not to be
// called under the store's lock.
func (vc *VolumeController) offline(pvc Object) bool {
	var c corev1.PersistentVolumeClaim
	if decodeInto(pvc, &c) != nil {
		return false
	}
	sc, ok := vc.api.Get(Ref{Type: TypeStorageClass, Name: claimClass(&c)})
	return ok && offlineExpansion(sc)
}

// startResize is markControllerResizeInProgress: Resizing, and the new
// size allocated.
func (vc *VolumeController) startResize(ref Ref, uid string) bool {
	var size string
	ok, _ := patchClaimStatus(vc.api, ref, uid, func(pvc *corev1.PersistentVolumeClaim, obj Object) bool {
		if !needsResize(obj) {
			return false
		}
		req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		size = req.String()
		setResizeState(pvc, &req, resizeControllerInProgress)
		pvc.Status.Conditions = mergeResizeConditions(pvc.Status.Conditions, corev1.PersistentVolumeClaimResizing, "")
		return true
	})
	if ok {
		vc.event(ref, "resizing to %s", size)
	}
	return ok
}

// finishControllerResize ends the driver's expansion: the volume has its
// new size. An online driver grows the file system of a volume mounted in
// a running Pod at once (the kubelet's online expansion) and of a volume
// no Pod uses without a node; otherwise the file system waits for a mount:
// FileSystemResizePending.
func (vc *VolumeController) finishControllerResize(ref Ref, uid string, offline bool, pods []Object) {
	var size string
	var pending bool
	ok, _ := patchClaimStatus(vc.api, ref, uid, func(pvc *corev1.PersistentVolumeClaim, obj Object) bool {
		if resizeState(obj) != resizeControllerInProgress {
			return false
		}
		alloc := pvc.Status.AllocatedResources[corev1.ResourceStorage]
		size = alloc.String()
		mounted, used := claimMounts(pods, ref.Namespace, ref.Name)
		pending = offline || (!mounted && used)
		if pending {
			setResizeState(pvc, nil, resizeNodePending)
			pvc.Status.Conditions = mergeResizeConditions(pvc.Status.Conditions, corev1.PersistentVolumeClaimFileSystemResizePending, fsResizePendingMessage)
			return true
		}
		markResized(pvc)
		return true
	})
	switch {
	case !ok:
	case pending:
		vc.event(ref, "volume grown to %s: FileSystemResizePending", size)
	default:
		vc.event(ref, "volume grown to %s", size)
	}
}

// finishNodeExpansion is the kubelet's NodeExpandVolume succeeding for a
// claim that waits for it: the claim has its new capacity. It reports
// whether the claim was waiting.
func finishNodeExpansion(api *APIServer, ref Ref, uid string) (bool, error) {
	return patchClaimStatus(api, ref, uid, func(pvc *corev1.PersistentVolumeClaim, obj Object) bool {
		if resizeState(obj) != resizeNodePending && !hasClaimCondition(pvc, corev1.PersistentVolumeClaimFileSystemResizePending) {
			return false
		}
		markResized(pvc)
		return true
	})
}

// markResized is markOverallExpansionAsFinished: the allocated size is the
// capacity, the resize conditions and the storage's resize status go.
func markResized(pvc *corev1.PersistentVolumeClaim) {
	size, ok := pvc.Status.AllocatedResources[corev1.ResourceStorage]
	if !ok {
		size = pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	}
	if pvc.Status.Capacity == nil {
		pvc.Status.Capacity = corev1.ResourceList{}
	}
	pvc.Status.Capacity[corev1.ResourceStorage] = size
	pvc.Status.Conditions = mergeResizeConditions(pvc.Status.Conditions, "", "")
	delete(pvc.Status.AllocatedResourceStatuses, corev1.ResourceStorage)
	if len(pvc.Status.AllocatedResourceStatuses) == 0 {
		pvc.Status.AllocatedResourceStatuses = nil
	}
}

// setResizeState records the storage's resize state, and with size the
// size allocated.
func setResizeState(pvc *corev1.PersistentVolumeClaim, size *resource.Quantity, state string) {
	if size != nil {
		if pvc.Status.AllocatedResources == nil {
			pvc.Status.AllocatedResources = corev1.ResourceList{}
		}
		pvc.Status.AllocatedResources[corev1.ResourceStorage] = *size
	}
	if pvc.Status.AllocatedResourceStatuses == nil {
		pvc.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{}
	}
	pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] = corev1.ClaimResourceStatus(state)
}

// resizeConditionTypes are the conditions the resizers own.
var resizeConditionTypes = map[corev1.PersistentVolumeClaimConditionType]bool{
	corev1.PersistentVolumeClaimResizing:                true,
	corev1.PersistentVolumeClaimFileSystemResizePending: true,
	corev1.PersistentVolumeClaimControllerResizeError:   true,
	corev1.PersistentVolumeClaimNodeResizeError:         true,
}

// mergeResizeConditions is MergeResizeConditionsOfPVC: the resize
// conditions become the one given (none with typ ""), an unchanged one
// keeping its lastTransitionTime; other conditions stay.
func mergeResizeConditions(conds []corev1.PersistentVolumeClaimCondition, typ corev1.PersistentVolumeClaimConditionType, msg string) []corev1.PersistentVolumeClaimCondition {
	var out []corev1.PersistentVolumeClaimCondition
	kept := false
	for _, c := range conds {
		switch {
		case !resizeConditionTypes[c.Type]:
			out = append(out, c)
		case c.Type == typ && c.Status == corev1.ConditionTrue:
			out = append(out, c)
			kept = true
		}
	}
	if typ != "" && !kept {
		out = append(out, corev1.PersistentVolumeClaimCondition{Type: typ, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.Now(), Message: msg})
	}
	return out
}

func hasClaimCondition(pvc *corev1.PersistentVolumeClaim, typ corev1.PersistentVolumeClaimConditionType) bool {
	for _, c := range pvc.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// patchClaimStatus edits a claim's status as a typed object, under the
// store's lock; edit gets the stored object too and reports whether it
// changed anything.
func patchClaimStatus(api *APIServer, ref Ref, uid string, edit func(pvc *corev1.PersistentVolumeClaim, obj Object) bool) (bool, error) {
	return api.patchStatus(ref, uid, func(obj Object) bool {
		var pvc corev1.PersistentVolumeClaim
		if err := json.Unmarshal(mustJSON(obj), &pvc); err != nil {
			return false
		}
		if !edit(&pvc, obj) {
			return false
		}
		st, err := normalize(pvc.Status)
		if err != nil {
			return false
		}
		obj["status"] = st
		return true
	})
}

// claimMounts tells whether a Pod of the namespace has the claim mounted
// and running (the kubelet started it: status.startTime; neither finished
// nor terminating), and whether any unfinished Pod uses it at all.
func claimMounts(pods []Object, namespace, claim string) (mounted, used bool) {
	for _, pod := range pods {
		if nestedString(pod, "metadata", "namespace") != namespace || !podUsesClaim(pod, claim) {
			continue
		}
		phase := nestedString(pod, "status", "phase")
		if phase == string(corev1.PodSucceeded) || phase == string(corev1.PodFailed) {
			continue
		}
		used = true
		if !isTerminating(pod) && nestedString(pod, "status", "startTime") != "" {
			mounted = true
		}
	}
	return mounted, used
}

// Claim returns a PersistentVolumeClaim as a typed object: its
// status.capacity, status.allocatedResources, status.conditions.
func (e *Env) Claim(namespace, name string) (*corev1.PersistentVolumeClaim, bool) {
	obj, ok := e.API.Get(Ref{Type: TypePVC, Namespace: namespace, Name: name})
	if !ok {
		return nil, false
	}
	var pvc corev1.PersistentVolumeClaim
	if decodeInto(obj, &pvc) != nil {
		return nil, false
	}
	return &pvc, true
}

// ClaimSummary is a one-line view of a claim for error messages.
func ClaimSummary(pvc *corev1.PersistentVolumeClaim) string {
	if pvc == nil {
		return "<none>"
	}
	req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	capacity := pvc.Status.Capacity[corev1.ResourceStorage]
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s request=%s capacity=%s", pvc.Name, pvc.Status.Phase, req.String(), capacity.String())
	if q, ok := pvc.Status.AllocatedResources[corev1.ResourceStorage]; ok {
		fmt.Fprintf(&b, " allocated=%s", q.String())
	}
	if s, ok := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; ok {
		fmt.Fprintf(&b, " (%s)", s)
	}
	for _, c := range pvc.Status.Conditions {
		fmt.Fprintf(&b, " [%s=%s]", c.Type, c.Status)
	}
	return b.String()
}
