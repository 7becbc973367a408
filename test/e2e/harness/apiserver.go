package harness

import (
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"
)

// ErrNotFound and ErrAlreadyExists mirror the API server's 404 and 409 so that
// callers can tell them apart with errors.Is.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	ErrInvalid       = errors.New("invalid")
	ErrConflict      = errors.New("conflict")
)

// EventType is the kind of a watch event.
type EventType string

const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
)

// Event is a watch event. Object is a private copy.
type Event struct {
	Type   EventType
	Ref    Ref
	Object Object
}

// APIServer stands in for kube-apiserver plus the few control-plane controllers
// whose effects the hook can observe: the PV binder (PVCs become Bound at once,
// pvc.go), pvc-protection (a PVC in use by a Pod survives its deletion until
// the Pod is gone), the garbage collector (ownerReferences cascade, background
// policy) and the disruption controller (PDB status). Everything happens
// synchronously inside the mutating call, which keeps the emulation
// deterministic; volume expansion, which takes time on a cluster too, is
// VolumeController's (volumecontroller.go). StorageClasses are
// cluster-scoped: their Ref has no namespace.
//
// Watchers get events after the lock is released, in the goroutine that made the
// change; they must not block.
type APIServer struct {
	mu      sync.Mutex
	rv      int64
	objs    map[Ref]Object
	subs    map[int]func(Event)
	nextSub int
	now     func() time.Time
	pending []Event // events produced under mu, flushed by unlock
}

// NewAPIServer returns an empty store.
func NewAPIServer() *APIServer {
	return &APIServer{objs: map[Ref]Object{}, subs: map[int]func(Event){}, now: time.Now}
}

// Subscribe registers fn for every later event. The returned func unsubscribes.
func (s *APIServer) Subscribe(fn func(Event)) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, id)
	}
}

func (s *APIServer) lock() { s.mu.Lock() }

// unlock releases the store and delivers the events produced meanwhile, so that
// watchers can call back into the store without deadlocking.
func (s *APIServer) unlock() {
	evs := s.pending
	s.pending = nil
	subs := make([]func(Event), 0, len(s.subs))
	for _, id := range sortedIntKeys(s.subs) {
		subs = append(subs, s.subs[id])
	}
	s.mu.Unlock()
	for _, ev := range evs {
		for _, fn := range subs {
			fn(Event{Type: ev.Type, Ref: ev.Ref, Object: copyObject(ev.Object)})
		}
	}
}

func sortedIntKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

func (s *APIServer) emit(t EventType, obj Object) {
	s.pending = append(s.pending, Event{Type: t, Ref: RefOf(obj), Object: copyObject(obj)})
}

func (s *APIServer) nextRV() string {
	s.rv++
	return fmt.Sprint(s.rv)
}

// Get returns a copy of the object.
func (s *APIServer) Get(ref Ref) (Object, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objs[ref]
	return copyObject(obj), ok
}

// List returns copies of all objects of a type in a namespace ("" = all), by name.
func (s *APIServer) List(typ, namespace string) []Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listLocked(typ, namespace, true)
}

func (s *APIServer) listLocked(typ, namespace string, copies bool) []Object {
	var refs []Ref
	for ref := range s.objs {
		if ref.Type == typ && (namespace == "" || ref.Namespace == namespace) {
			refs = append(refs, ref)
		}
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].Namespace != refs[j].Namespace {
			return refs[i].Namespace < refs[j].Namespace
		}
		return refs[i].Name < refs[j].Name
	})
	out := make([]Object, 0, len(refs))
	for _, r := range refs {
		if copies {
			out = append(out, copyObject(s.objs[r]))
		} else {
			out = append(out, s.objs[r])
		}
	}
	return out
}

func newUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("harness: random uid: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Create stores a new object, filling in the server-owned metadata.
func (s *APIServer) Create(obj Object) (Object, error) {
	in, err := normalize(obj)
	if err != nil {
		return nil, err
	}
	ref := scopedRef(in)
	if ref.Name == "" || (ref.Namespace == "" && !clusterScoped(ref.Type)) {
		return nil, fmt.Errorf("create %s: metadata.name and metadata.namespace are required: %w", ref, ErrInvalid)
	}
	s.lock()
	defer s.unlock()
	if _, ok := s.objs[ref]; ok {
		return nil, fmt.Errorf("create %s: %w", ref, ErrAlreadyExists)
	}
	now := s.now()
	md := ensureMap(in, "metadata")
	md["uid"] = newUID()
	md["creationTimestamp"] = timestamp(now)
	md["generation"] = float64(1)
	delete(md, "deletionTimestamp")
	delete(md, "deletionGracePeriodSeconds")
	switch ref.Type {
	case TypePod:
		// The API server resets a Pod's status on create; only the kubelet writes it.
		in["status"] = map[string]any{"phase": "Pending", "qosClass": "BestEffort"}
	case TypeService:
		in["status"] = map[string]any{"loadBalancer": map[string]any{}}
	case TypePVC:
		s.defaultClaimClassLocked(in)
		setFinalizers(in, appendUnique(finalizersOf(in), pvcProtectionFinalizer))
		bindPVC(in)
	case TypePDB:
		in["status"] = map[string]any{}
	case TypeStorageClass:
		defaultStorageClass(in)
	}
	out, err := validateCreate(ref.Type, in)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", ref, err)
	}
	ensureMap(out, "metadata")["resourceVersion"] = s.nextRV()
	s.objs[ref] = out
	s.emit(Added, out)
	s.afterChangeLocked(ref.Namespace)
	return copyObject(out), nil
}

const pvcProtectionFinalizer = "kubernetes.io/pvc-protection"

// scopedRef is RefOf an object about to be stored: a cluster-scoped type's
// namespace is dropped, as the API server clears it.
func scopedRef(obj Object) Ref {
	ref := RefOf(obj)
	if clusterScoped(ref.Type) {
		delete(ensureMap(obj, "metadata"), "namespace")
		ref.Namespace = ""
	}
	return ref
}

// Update replaces the main resource (everything but status), like a PUT by
// Metacontroller. Server-owned metadata is kept. It reports whether anything
// changed: a no-op update does not bump resourceVersion and emits no event,
// as with the real API server.
func (s *APIServer) Update(obj Object) (Object, bool, error) {
	in, err := normalize(obj)
	if err != nil {
		return nil, false, err
	}
	ref := scopedRef(in)
	s.lock()
	defer s.unlock()
	cur, ok := s.objs[ref]
	if !ok {
		return nil, false, fmt.Errorf("update %s: %w", ref, ErrNotFound)
	}
	if uid := nestedString(in, "metadata", "uid"); uid != "" && uid != nestedString(cur, "metadata", "uid") {
		return nil, false, fmt.Errorf("update %s: uid precondition %s: %w", ref, uid, ErrConflict)
	}
	md := ensureMap(in, "metadata")
	curMD := nestedMap(cur, "metadata")
	for _, k := range []string{"uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"} {
		if v, ok := curMD[k]; ok {
			md[k] = deepCopyJSON(v)
		} else {
			delete(md, k)
		}
	}
	if st, ok := cur["status"]; ok {
		in["status"] = deepCopyJSON(st)
	} else {
		delete(in, "status")
	}
	out, err := validateUpdate(ref.Type, cur, in)
	if err == nil && ref.Type == TypePVC {
		// Validating admission comes after the object's validation.
		err = s.admitClaimResizeLocked(cur, out)
	}
	if err != nil {
		return nil, false, fmt.Errorf("update %s: %w", ref, err)
	}
	if reflect.DeepEqual(out, cur) {
		return copyObject(cur), false, nil
	}
	if !reflect.DeepEqual(out["spec"], cur["spec"]) {
		g, _ := nestedInt(cur, "metadata", "generation")
		ensureMap(out, "metadata")["generation"] = float64(g + 1)
	}
	ensureMap(out, "metadata")["resourceVersion"] = s.nextRV()
	s.objs[ref] = out
	s.emit(Modified, out)
	if isTerminating(out) && len(finalizersOf(out)) == 0 {
		s.removeLocked(ref)
	}
	s.afterChangeLocked(ref.Namespace)
	return copyObject(out), true, nil
}

// UpdateStatus replaces .status of the object with the given uid, like a PUT to
// the status subresource. It reports whether anything changed.
func (s *APIServer) UpdateStatus(ref Ref, uid string, status any) (bool, error) {
	st, err := normalize(map[string]any{"status": status})
	if err != nil {
		return false, err
	}
	s.lock()
	defer s.unlock()
	cur, ok := s.objs[ref]
	if !ok || (uid != "" && nestedString(cur, "metadata", "uid") != uid) {
		return false, fmt.Errorf("update status %s: %w", ref, ErrNotFound)
	}
	if reflect.DeepEqual(cur["status"], st["status"]) {
		return false, nil
	}
	next := copyObject(cur)
	if st["status"] == nil {
		delete(next, "status")
	} else {
		next["status"] = st["status"]
	}
	ensureMap(next, "metadata")["resourceVersion"] = s.nextRV()
	s.objs[ref] = next
	s.emit(Modified, next)
	s.afterChangeLocked(ref.Namespace)
	return true, nil
}

// patchStatus is a read-modify-write of the status of the object with the
// given uid, under the store's lock, as a controller's status PATCH with a
// resourceVersion precondition that never loses: fn edits a copy of the
// whole object and reports whether it changed anything (only .status is
// kept). It reports whether the object changed.
func (s *APIServer) patchStatus(ref Ref, uid string, fn func(obj Object) bool) (bool, error) {
	s.lock()
	defer s.unlock()
	cur, ok := s.objs[ref]
	if !ok || (uid != "" && nestedString(cur, "metadata", "uid") != uid) {
		return false, fmt.Errorf("patch status %s: %w", ref, ErrNotFound)
	}
	next := copyObject(cur)
	if !fn(next) {
		return false, nil
	}
	st, err := normalize(map[string]any{"status": next["status"]})
	if err != nil {
		return false, err
	}
	if reflect.DeepEqual(cur["status"], st["status"]) {
		return false, nil
	}
	next = copyObject(cur)
	next["status"] = st["status"]
	ensureMap(next, "metadata")["resourceVersion"] = s.nextRV()
	s.objs[ref] = next
	s.emit(Modified, next)
	s.afterChangeLocked(ref.Namespace)
	return true, nil
}

// Mutate applies fn to a copy of the object and stores the result as a metadata
// or spec change of a custom resource (the parent): generation is bumped when
// spec changes, as for CRDs. fn returning an error aborts the change.
func (s *APIServer) Mutate(ref Ref, fn func(Object) error) (Object, error) {
	s.lock()
	defer s.unlock()
	cur, ok := s.objs[ref]
	if !ok {
		return nil, fmt.Errorf("mutate %s: %w", ref, ErrNotFound)
	}
	next := copyObject(cur)
	if err := fn(next); err != nil {
		return nil, fmt.Errorf("mutate %s: %w", ref, err)
	}
	next, err := normalize(next)
	if err != nil {
		return nil, err
	}
	if reflect.DeepEqual(next, cur) {
		return copyObject(cur), nil
	}
	if !reflect.DeepEqual(next["spec"], cur["spec"]) {
		g, _ := nestedInt(cur, "metadata", "generation")
		ensureMap(next, "metadata")["generation"] = float64(g + 1)
	}
	ensureMap(next, "metadata")["resourceVersion"] = s.nextRV()
	s.objs[ref] = next
	s.emit(Modified, next)
	if isTerminating(next) && len(finalizersOf(next)) == 0 {
		s.removeLocked(ref)
	}
	s.afterChangeLocked(ref.Namespace)
	return copyObject(next), nil
}

// Delete starts deleting an object the way the API server does: Pods are
// deleted gracefully (deletionTimestamp, the kubelet finishes the job), objects
// with finalizers wait for them, everything else goes at once and its
// dependents are garbage-collected. uid, when set, is a precondition.
func (s *APIServer) Delete(ref Ref, uid string) error {
	s.lock()
	defer s.unlock()
	cur, ok := s.objs[ref]
	if !ok || (uid != "" && nestedString(cur, "metadata", "uid") != uid) {
		return fmt.Errorf("delete %s: %w", ref, ErrNotFound)
	}
	s.deleteLocked(ref)
	s.afterChangeLocked(ref.Namespace)
	return nil
}

func (s *APIServer) deleteLocked(ref Ref) {
	cur, ok := s.objs[ref]
	if !ok || isTerminating(cur) {
		return
	}
	graceful := ref.Type == TypePod || len(finalizersOf(cur)) > 0
	if !graceful {
		s.removeLocked(ref)
		return
	}
	next := copyObject(cur)
	md := ensureMap(next, "metadata")
	md["deletionTimestamp"] = timestamp(s.now())
	switch ref.Type {
	case TypePod:
		grace, ok := nestedInt(cur, "spec", "terminationGracePeriodSeconds")
		if !ok {
			grace = 30
		}
		md["deletionGracePeriodSeconds"] = float64(grace)
	case TypeService, TypePVC, TypePDB:
		md["deletionGracePeriodSeconds"] = float64(0)
	default:
		// Custom resources get a new generation when deletion starts; the
		// captured finalize request shows generation 3 after one spec patch.
		g, _ := nestedInt(cur, "metadata", "generation")
		md["generation"] = float64(g + 1)
		md["deletionGracePeriodSeconds"] = float64(0)
	}
	md["resourceVersion"] = s.nextRV()
	s.objs[ref] = next
	s.emit(Modified, next)
}

// Remove deletes an object for good: the kubelet calls it once a terminating
// Pod's containers are gone. uid, when set, is a precondition.
func (s *APIServer) Remove(ref Ref, uid string) error {
	s.lock()
	defer s.unlock()
	cur, ok := s.objs[ref]
	if !ok || (uid != "" && nestedString(cur, "metadata", "uid") != uid) {
		return fmt.Errorf("remove %s: %w", ref, ErrNotFound)
	}
	s.removeLocked(ref)
	s.afterChangeLocked(ref.Namespace)
	return nil
}

func (s *APIServer) removeLocked(ref Ref) {
	cur, ok := s.objs[ref]
	if !ok {
		return
	}
	delete(s.objs, ref)
	s.emit(Deleted, cur)
	// Garbage collector, background propagation: dependents are deleted
	// after their owner is gone.
	uid := nestedString(cur, "metadata", "uid")
	var deps []Ref
	for r, o := range s.objs {
		for _, ou := range ownerUIDs(o) {
			if ou == uid {
				deps = append(deps, r)
			}
		}
	}
	sort.Slice(deps, func(i, j int) bool { return deps[i].String() < deps[j].String() })
	for _, d := range deps {
		s.deleteLocked(d)
	}
}

// afterChangeLocked runs the emulated control-plane controllers of a
// namespace; a cluster-scoped object ("") concerns none of them.
func (s *APIServer) afterChangeLocked(namespace string) {
	if namespace == "" {
		return
	}
	s.pvcProtectionLocked(namespace)
	s.disruptionLocked(namespace)
}

// pvcProtectionLocked lets a terminating PVC go once no Pod refers to it.
func (s *APIServer) pvcProtectionLocked(namespace string) {
	for _, pvc := range s.listLocked(TypePVC, namespace, false) {
		if !isTerminating(pvc) {
			continue
		}
		name := nestedString(pvc, "metadata", "name")
		fins := finalizersOf(pvc)
		if containsString(fins, pvcProtectionFinalizer) {
			if s.claimInUseLocked(namespace, name) {
				continue
			}
			fins = removeString(fins, pvcProtectionFinalizer)
			ref := RefOf(pvc)
			next := copyObject(pvc)
			setFinalizers(next, fins)
			ensureMap(next, "metadata")["resourceVersion"] = s.nextRV()
			s.objs[ref] = next
			s.emit(Modified, next)
		}
		if len(fins) == 0 {
			s.removeLocked(RefOf(pvc))
		}
	}
}

// claimInUseLocked tells whether a Pod that has not finished refers to the claim;
// terminating Pods still count, their containers may still write.
func (s *APIServer) claimInUseLocked(namespace, claim string) bool {
	for _, pod := range s.listLocked(TypePod, namespace, false) {
		if !podUsesClaim(pod, claim) {
			continue
		}
		phase := nestedString(pod, "status", "phase")
		if phase != "Succeeded" && phase != "Failed" {
			return true
		}
	}
	return false
}

func podUsesClaim(pod Object, claim string) bool {
	vols, _ := nested(pod, "spec", "volumes")
	list, _ := vols.([]any)
	for _, v := range list {
		if nestedString(v, "persistentVolumeClaim", "claimName") == claim {
			return true
		}
	}
	return false
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func removeString(list []string, s string) []string {
	out := list[:0:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}
