package harness

import (
	"strconv"
	"time"
)

// The parent as Metacontroller's informer cache holds it, lagging the API
// server by ControllerConfig.ParentCacheLag.

// SetParentCacheLag sets ControllerConfig.ParentCacheLag from now on; 0
// turns it off. See cachedParent.
func (mc *Metacontroller) SetParentCacheLag(lag time.Duration) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.parentLag = lag
}

// parentVersion is one version of a parent as the watch delivered it.
type parentVersion struct {
	seen time.Time
	rv   int64
	obj  Object
}

// observeParent keeps a version of a parent for cachedParent. A version
// of another UID (the parent deleted and created again) replaces them
// all; one not newer than the newest kept (an event delivered late) is
// left out.
func (mc *Metacontroller) observeParent(obj Object) {
	key := parentKey(RefOf(obj))
	rv, err := strconv.ParseInt(nestedString(obj, "metadata", "resourceVersion"), 10, 64)
	if err != nil {
		return
	}
	uid := nestedString(obj, "metadata", "uid")
	mc.mu.Lock()
	defer mc.mu.Unlock()
	vs := mc.parentVersions[key]
	if len(vs) > 0 && nestedString(vs[0].obj, "metadata", "uid") != uid {
		vs = nil
	}
	if n := len(vs); n > 0 && vs[n-1].rv >= rv {
		return
	}
	now := mc.now()
	vs = append(vs, parentVersion{seen: now, rv: rv, obj: copyObject(obj)})
	// Only the newest version old enough to be served, and the newer
	// ones, can be served again.
	for len(vs) > 1 && !vs[1].seen.After(now.Add(-mc.parentLag)) {
		vs = vs[1:]
	}
	mc.parentVersions[key] = vs
}

func (mc *Metacontroller) forgetParent(ref Ref) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	delete(mc.parentVersions, parentKey(ref))
}

// cachedParent is the parent a sync is served, given fresh, the parent as
// the API server has it now. Without ParentCacheLag that is fresh itself.
//
// With it, it is what Metacontroller's informer cache could hold: the
// newest version seen at least ParentCacheLag ago, or, when every version
// is younger, the oldest one kept, never one from before the parent (this
// UID) existed. Metacontroller (v4.17.2 as any other) syncs a parent from
// its informer cache, which need not hold yet the status the previous
// sync wrote; and its status write, AtomicStatusUpdate, answers a
// conflict by reading the object again and writing the same status it
// computed, so a status computed from a stale parent replaces a newer
// one. A hook that carries state from status to status (a phase that
// moves on) can thus see, and write back, a state it already left: that
// left an EtcdRestore Verifying for good although the restore was done.
// syncParent writes the status by UID as AtomicStatusUpdate does, so
// serving the stale parent is all the emulation needs. Children (and
// related objects) are still read fresh. The lag is fixed rather than
// random so that a scenario gets the same window every run.
func (mc *Metacontroller) cachedParent(fresh Object) Object {
	mc.observeParent(fresh)
	key := parentKey(RefOf(fresh))
	mc.mu.Lock()
	defer mc.mu.Unlock()
	vs := mc.parentVersions[key]
	if mc.parentLag <= 0 || len(vs) == 0 || nestedString(vs[0].obj, "metadata", "uid") != nestedString(fresh, "metadata", "uid") {
		return fresh
	}
	cutoff := mc.now().Add(-mc.parentLag)
	served := vs[0]
	for _, v := range vs[1:] {
		if v.seen.After(cutoff) {
			break
		}
		served = v
	}
	return copyObject(served.obj)
}
