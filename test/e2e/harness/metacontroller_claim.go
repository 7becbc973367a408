package harness

import (
	"errors"
	"fmt"
	"reflect"
)

// Which objects are a parent's children: claimChildren of Metacontroller
// v4.17.2 (pkg/controller/composite/controller.go) with generateSelector,
// whose selector is controller-uid=<parent uid>, and its ControllerRefManager
// (pkg/third_party/kubernetes/controller_ref_manager.go ClaimObject,
// pkg/dynamic/controllerref/unstructured.go). For every child type it looks
// at the objects of the parent's namespace that the parent controls (its
// uid in a controller ownerReference) and at the orphans (no controller
// ownerReference):
//
//   - controlled by the parent (the first ownerReference with controller:
//     true, as metav1.GetControllerOf reads it) and matching the selector:
//     a child, even while the parent is being deleted;
//   - controlled by the parent, not matching: released, the parent's
//     ownerReferences removed from it by an update, unless the parent is
//     being deleted; not a child either way;
//   - an orphan that matches, not being deleted, of a parent not being
//     deleted: adopted, an ownerReference {apiVersion, kind, name, uid of
//     the parent, controller: true, blockOwnerDeletion: true} added (or put
//     in place of one with the parent's uid), after a fresh read of the
//     parent shows it still there, same uid, not being deleted. The request
//     shows the object as it was read, without that reference, and an
//     InPlace update of it in the same sync fails on its stale
//     resourceVersion (a conflict Metacontroller logs and ignores); the
//     adoption's own event brings the next sync;
//   - controlled by another owner: ignored.
//
// A release or adoption that fails (but for the object being gone) fails
// the sync before the hook is called, as "can't claim <Kind> children".
// An orphan that changes is, as in Metacontroller, a reason to sync the
// parents whose selector it matches (onEvent).

type claimAction int

const (
	claimIgnore claimAction = iota
	claimKeep
	claimRelease
	claimAdopt
)

// claimActionFor is ClaimObject's decision for one object.
func claimActionFor(obj Object, parentUID string, parentDeleting bool) claimAction {
	match := nestedString(obj, "metadata", "labels", LabelControllerUID) == parentUID
	if ctrl, ok := controllerRef(obj); ok {
		switch {
		case ctrl != parentUID:
			return claimIgnore
		case match:
			return claimKeep
		case parentDeleting:
			return claimIgnore
		}
		return claimRelease
	}
	if parentDeleting || !match || isTerminating(obj) {
		return claimIgnore
	}
	return claimAdopt
}

// controllerRef is the uid of the first ownerReference with controller:
// true, and whether there is one.
func controllerRef(obj Object) (string, bool) {
	refs, _ := nested(obj, "metadata", "ownerReferences")
	list, _ := refs.([]any)
	for _, r := range list {
		m, _ := r.(map[string]any)
		if c, _ := m["controller"].(bool); c {
			uid, _ := m["uid"].(string)
			return uid, true
		}
	}
	return "", false
}

// observedChildren is the children map the parent's next request would
// show, without claiming anything: every declared type, even when empty,
// and the objects claimChildren keeps or would adopt.
func (mc *Metacontroller) observedChildren(parent Object) map[string]map[string]Object {
	out, _, _ := mc.claimChildren(parent, false)
	return out
}

// claimChildren builds the request's children map, and with act releases
// and adopts as Metacontroller does. adopted lists the children this call
// adopted: their map entry predates the adoption.
func (mc *Metacontroller) claimChildren(parent Object, act bool) (children map[string]map[string]Object, adopted map[Ref]bool, err error) {
	uid := nestedString(parent, "metadata", "uid")
	ns := nestedString(parent, "metadata", "namespace")
	key := ns + "/" + nestedString(parent, "metadata", "name")
	mc.mu.Lock()
	hidden := mc.hideChildren[key]
	mc.mu.Unlock()
	deleting := isTerminating(parent)
	children, adopted = map[string]map[string]Object{}, map[Ref]bool{}
	for _, t := range mc.cfg.ChildTypes {
		m := map[string]Object{}
		children[t.Key()] = m
		if hidden {
			continue
		}
		// CanAdopt is asked once per child type, on the first adoption.
		var canAdopt *error
		var errs []error
		for _, obj := range mc.api.List(t.Key(), ns) {
			name := nestedString(obj, "metadata", "name")
			switch claimActionFor(obj, uid, deleting) {
			case claimKeep:
				m[name] = obj
			case claimRelease:
				if !act {
					continue
				}
				if err := mc.release(key, obj, uid); err != nil && !errors.Is(err, ErrNotFound) {
					errs = append(errs, err)
				}
			case claimAdopt:
				if !act {
					m[name] = obj
					continue
				}
				if canAdopt == nil {
					err := mc.canAdopt(parent)
					canAdopt = &err
				}
				err := *canAdopt
				if err == nil {
					err = mc.adopt(key, obj, parent)
				} else {
					err = fmt.Errorf("can't adopt %s %s/%s (%s): %w", t.Kind, ns, name, nestedString(obj, "metadata", "uid"), err)
				}
				switch {
				case errors.Is(err, ErrNotFound):
				case err != nil:
					errs = append(errs, err)
				default:
					m[name] = obj
					adopted[RefOf(obj)] = true
				}
			}
		}
		if len(errs) > 0 {
			return nil, nil, fmt.Errorf("can't claim %s children: %w", t.Kind, errors.Join(errs...))
		}
	}
	return children, adopted, nil
}

// canAdopt is Metacontroller's RecheckDeletionTimestamp: an uncached read
// of the parent, which must still be there, with the same uid, and not
// being deleted.
func (mc *Metacontroller) canAdopt(parent Object) error {
	ref := RefOf(parent)
	fresh, ok := mc.api.Get(ref)
	if !ok {
		return fmt.Errorf("can't recheck DeletionTimestamp: %s: %w", ref, errNotFoundParent)
	}
	if got, want := nestedString(fresh, "metadata", "uid"), nestedString(parent, "metadata", "uid"); got != want {
		return fmt.Errorf("original %s %s/%s is gone: got uid %s, wanted %s", mc.cfg.ParentKind, ref.Namespace, ref.Name, got, want)
	}
	if isTerminating(fresh) {
		return fmt.Errorf("%s/%s has just been deleted at %s", ref.Namespace, ref.Name, nestedString(fresh, "metadata", "deletionTimestamp"))
	}
	return nil
}

// errNotFoundParent is a vanished parent: unlike a vanished child, it
// fails the claim.
var errNotFoundParent = errors.New("parent not found")

// adopt adds the parent's controller reference to obj (the object of that
// uid: one replaced since is not adopted, ErrNotFound).
func (mc *Metacontroller) adopt(key string, obj, parent Object) error {
	ref := RefOf(obj)
	mc.cfg.Logf("metacontroller: %s: adopting %s", key, ref)
	owner := map[string]any{
		"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": mc.cfg.ParentKind,
		"name": nestedString(parent, "metadata", "name"), "uid": nestedString(parent, "metadata", "uid"),
		"controller": true, "blockOwnerDeletion": true,
	}
	err := mc.api.updateOwnerRefs(ref, nestedString(obj, "metadata", "uid"), func(refs []any) []any {
		out := make([]any, 0, len(refs)+1)
		found := false
		for _, r := range refs {
			if m, _ := r.(map[string]any); m["uid"] == owner["uid"] {
				out, found = append(out, owner), true
				continue
			}
			out = append(out, r)
		}
		if !found {
			out = append(out, owner)
		}
		return out
	})
	if err == nil {
		mc.count(key, func(m *Metrics) { m.ChildAdoptions++ })
	}
	return err
}

// release removes every ownerReference to the parent from obj.
func (mc *Metacontroller) release(key string, obj Object, parentUID string) error {
	ref := RefOf(obj)
	mc.cfg.Logf("metacontroller: %s: releasing %s (no %s=%s label)", key, ref, LabelControllerUID, parentUID)
	err := mc.api.updateOwnerRefs(ref, nestedString(obj, "metadata", "uid"), func(refs []any) []any {
		out := make([]any, 0, len(refs))
		for _, r := range refs {
			if m, _ := r.(map[string]any); m["uid"] != parentUID {
				out = append(out, r)
			}
		}
		return out
	})
	if err == nil {
		mc.count(key, func(m *Metrics) { m.ChildReleases++ })
	}
	return err
}

// parentsSelecting lists the parents of namespace whose generated selector
// an orphan matches: Metacontroller's findPotentialParents.
func (mc *Metacontroller) parentsSelecting(obj Object, namespace string) []Ref {
	uid := nestedString(obj, "metadata", "labels", LabelControllerUID)
	if uid == "" {
		return nil
	}
	var out []Ref
	for _, p := range mc.api.List(mc.cfg.ParentType, namespace) {
		if nestedString(p, "metadata", "uid") == uid {
			out = append(out, RefOf(p))
		}
	}
	return out
}

// updateOwnerRefs is the GET and PUT of Metacontroller's AtomicUpdate that
// only changes metadata.ownerReferences, made atomic under the store's
// lock: the object of that uid (else ErrNotFound) gets edit's list, a new
// resourceVersion and a Modified event when it changed. Unlike Update and
// Mutate it never completes a deletion: a terminating Pod stays for the
// kubelet to finish.
func (s *APIServer) updateOwnerRefs(ref Ref, uid string, edit func([]any) []any) error {
	s.lock()
	defer s.unlock()
	cur, ok := s.objs[ref]
	if !ok || (uid != "" && nestedString(cur, "metadata", "uid") != uid) {
		return fmt.Errorf("update %s: %w", ref, ErrNotFound)
	}
	next := copyObject(cur)
	md := ensureMap(next, "metadata")
	refs, _ := md["ownerReferences"].([]any)
	if refs = edit(refs); len(refs) == 0 {
		delete(md, "ownerReferences")
	} else {
		md["ownerReferences"] = refs
	}
	if reflect.DeepEqual(next, cur) {
		return nil
	}
	md["resourceVersion"] = s.nextRV()
	s.objs[ref] = next
	s.emit(Modified, next)
	s.afterChangeLocked(ref.Namespace)
	return nil
}
