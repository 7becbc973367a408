package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"
)

// One sync of a parent: the request (the observed children, the related
// objects), the hook call, and its answer applied: children deleted, created
// and updated by their update strategy, then the parent's status.

type hookResponse struct {
	Status             map[string]any   `json:"status"`
	Children           []map[string]any `json:"children"`
	ResyncAfterSeconds float64          `json:"resyncAfterSeconds"`
	Finalized          bool             `json:"finalized"`
}

// syncParent is one pass of Metacontroller's sync for a parent.
func (mc *Metacontroller) syncParent(ctx context.Context, w *parentWorker) error {
	key := parentKey(w.ref)
	parent, ok := mc.api.Get(w.ref)
	if !ok {
		return nil
	}
	parent = mc.cachedParent(parent)
	finalizing := isTerminating(parent)
	fin := mc.Finalizer()
	if !containsString(finalizersOf(parent), fin) {
		if finalizing {
			return nil // not ours to finalize
		}
		// With a finalize hook, Metacontroller puts its finalizer on the
		// parent before the first call; the captured first request has it.
		p, err := mc.api.Mutate(w.ref, func(o Object) error {
			setFinalizers(o, appendUnique(finalizersOf(o), fin))
			return nil
		})
		if err != nil {
			return fmt.Errorf("add finalizer: %w", err)
		}
		parent = p
	}
	uid := nestedString(parent, "metadata", "uid")
	observed, adopted, err := mc.claimChildren(parent, true)
	if err != nil {
		return err
	}
	related := map[string]map[string]Object{}
	if mc.cfg.CustomizeURL != "" {
		var err error
		if related, err = mc.related(ctx, parent); err != nil {
			mc.count(key, func(m *Metrics) { m.HookErrors++ })
			return err
		}
	}
	body := mustJSON(map[string]any{
		"controller": mc.ctrl,
		"parent":     parent,
		"children":   observed,
		"related":    related,
		"finalizing": finalizing,
	})
	url := mc.cfg.SyncURL
	if finalizing {
		url = mc.cfg.FinalizeURL
	}
	mc.count(key, func(m *Metrics) {
		if finalizing {
			m.Finalizes++
		} else {
			m.Syncs++
		}
	})
	resp, err := mc.call(ctx, key, url, body, finalizing)
	if err != nil {
		var ra retryAfterError
		if !errors.As(err, &ra) {
			mc.count(key, func(m *Metrics) { m.HookErrors++ })
		}
		return err
	}
	if resp.ResyncAfterSeconds > 0 {
		w.requeueAfter(time.Duration(resp.ResyncAfterSeconds * float64(time.Second)))
	}
	desired, err := mc.desiredChildren(parent, resp.Children)
	if err != nil {
		mc.count(key, func(m *Metrics) { m.HookErrors++ })
		return err
	}
	manageErr := mc.manageChildren(key, parent, observed, adopted, desired)
	mc.mu.Lock()
	drop := mc.dropStatus[key]
	mc.mu.Unlock()
	if drop {
		mc.count(key, func(m *Metrics) { m.StatusDropped++ })
		return manageErr
	}
	status := resp.Status
	if status == nil {
		status = map[string]any{}
	}
	gen, _ := nestedInt(parent, "metadata", "generation")
	status["observedGeneration"] = gen
	// As Metacontroller's AtomicStatusUpdate: by UID, over whatever status
	// the parent has now, even when the hook computed this one from an
	// older parent (ParentCacheLag).
	changed, err := mc.api.UpdateStatus(w.ref, uid, status)
	if err != nil {
		return errors.Join(manageErr, fmt.Errorf("update parent status: %w", err))
	}
	if changed {
		mc.count(key, func(m *Metrics) { m.StatusUpdates++ })
	}
	if finalizing && resp.Finalized {
		_, err := mc.api.Mutate(w.ref, func(o Object) error {
			if nestedString(o, "metadata", "uid") != uid {
				return ErrConflict
			}
			setFinalizers(o, removeString(finalizersOf(o), fin))
			return nil
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return errors.Join(manageErr, fmt.Errorf("remove finalizer: %w", err))
		}
	}
	return manageErr
}

// call POSTs one hook request. Only a 200 with a JSON body is a success.
func (mc *Metacontroller) call(ctx context.Context, key, url string, body []byte, finalizing bool) (*hookResponse, error) {
	rec := SyncRecord{Parent: key, Finalizing: finalizing, Start: time.Now(), Request: body}
	defer func() {
		rec.Duration = time.Since(rec.Start)
		mc.record(rec)
	}()
	ctx, cancel := context.WithTimeout(ctx, mc.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		rec.Err = err
		return nil, fmt.Errorf("hook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := mc.syncClient
	if finalizing {
		client = mc.finalizeClient
	}
	resp, err := client.Do(req)
	if err != nil {
		rec.Err = err
		return nil, fmt.Errorf("hook %s: %w", url, err)
	}
	defer resp.Body.Close()
	rec.HTTPStatus = resp.StatusCode
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	rec.Response = data
	if err != nil {
		rec.Err = err
		return nil, fmt.Errorf("hook %s: read answer: %w", url, err)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
			rec.Err = retryAfterError{time.Duration(secs) * time.Second}
			return nil, rec.Err
		}
	}
	if resp.StatusCode != http.StatusOK {
		rec.Err = fmt.Errorf("hook %s: HTTP %d: %s", url, resp.StatusCode, bytes.TrimSpace(data))
		return nil, rec.Err
	}
	var out hookResponse
	if err := json.Unmarshal(data, &out); err != nil {
		rec.Err = fmt.Errorf("hook %s: decode answer: %w", url, err)
		return nil, rec.Err
	}
	rec.ResyncAfter, rec.Finalized = out.ResyncAfterSeconds, out.Finalized
	return &out, nil
}

// desiredChildren validates the hook's children and adds what Metacontroller
// adds: the namespace, the controller-uid label and the last-applied
// annotation. Any invalid child fails the whole answer: nothing is applied.
func (mc *Metacontroller) desiredChildren(parent Object, children []map[string]any) (map[string]map[string]Object, error) {
	uid := nestedString(parent, "metadata", "uid")
	ns := nestedString(parent, "metadata", "namespace")
	out := map[string]map[string]Object{}
	for i, c := range children {
		obj, err := normalize(c)
		if err != nil {
			return nil, fmt.Errorf("child %d: %w", i, err)
		}
		typ := TypeKey(obj)
		if _, ok := mc.types[typ]; !ok {
			return nil, fmt.Errorf("child %d: type %q is not among the controller's childResources", i, typ)
		}
		name := nestedString(obj, "metadata", "name")
		if name == "" {
			return nil, fmt.Errorf("child %d (%s): metadata.name is required", i, typ)
		}
		md := ensureMap(obj, "metadata")
		if cns, ok := md["namespace"].(string); ok && cns != "" && cns != ns {
			return nil, fmt.Errorf("child %s %s: namespace %q differs from the parent's %q", typ, name, cns, ns)
		}
		md["namespace"] = ns
		labels := ensureMap(obj, "metadata", "labels")
		if v, ok := labels[LabelControllerUID]; !ok {
			labels[LabelControllerUID] = uid
		} else if v != uid {
			return nil, fmt.Errorf("labels on desired child %s %s/%s don't match parent selector", typ, ns, name)
		}
		if ann := nestedMap(obj, "metadata", "annotations"); ann != nil {
			delete(ann, AnnotationLastApplied)
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
		last := string(mustJSON(obj))
		ensureMap(obj, "metadata", "annotations")[AnnotationLastApplied] = last
		if out[typ] == nil {
			out[typ] = map[string]Object{}
		}
		out[typ][name] = obj
	}
	return out, nil
}

// manageChildren deletes the observed children the hook left out, then
// creates or updates the desired ones. Failures are recorded and returned
// together; the other children are still applied. As Metacontroller's
// DynamicApply, a create whose name is taken (AlreadyExists: an object
// this parent does not claim, or one the request did not show) is logged
// and skipped, and an InPlace update of a child adopted by this sync
// (adopted), whose observed copy predates the adoption, is a conflict,
// logged and skipped too.
func (mc *Metacontroller) manageChildren(key string, parent Object, observed map[string]map[string]Object, adopted map[Ref]bool,
	desired map[string]map[string]Object) error {
	var errs []error
	uid := nestedString(parent, "metadata", "uid")
	for _, t := range mc.cfg.ChildTypes {
		typ := t.Key()
		for _, name := range sortedKeys(observed[typ]) {
			obj := observed[typ][name]
			if _, keep := desired[typ][name]; keep || isTerminating(obj) {
				continue
			}
			ref := RefOf(obj)
			if err := mc.api.Delete(ref, nestedString(obj, "metadata", "uid")); err != nil && !errors.Is(err, ErrNotFound) {
				mc.applyError(key, ref, "delete", err)
				errs = append(errs, err)
				continue
			}
			mc.count(key, func(m *Metrics) { m.ChildDeletes++ })
		}
	}
	for _, typ := range mc.applyOrder() {
		t := mc.types[typ]
		for _, name := range sortedKeys(desired[typ]) {
			want := desired[typ][name]
			ref := RefOf(want)
			cur, exists := observed[typ][name]
			if !exists {
				obj := copyObject(want)
				md := ensureMap(obj, "metadata")
				owners, _ := md["ownerReferences"].([]any)
				md["ownerReferences"] = append(owners, map[string]any{
					"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": mc.cfg.ParentKind,
					"name": nestedString(parent, "metadata", "name"), "uid": uid,
					"controller": true, "blockOwnerDeletion": true,
				})
				if _, err := mc.api.Create(obj); errors.Is(err, ErrAlreadyExists) {
					mc.cfg.Logf("metacontroller: %s: failed to create child, child object already exists: %s", key, ref)
					mc.count(key, func(m *Metrics) { m.ChildCreatesExisting++ })
					continue
				} else if err != nil {
					mc.applyError(key, ref, "create", err)
					errs = append(errs, err)
					continue
				}
				mc.count(key, func(m *Metrics) { m.ChildCreates++ })
				continue
			}
			if isTerminating(cur) {
				continue // recreated by a later sync once it is gone
			}
			var last Object
			if s := nestedString(cur, "metadata", "annotations", AnnotationLastApplied); s != "" {
				_ = json.Unmarshal([]byte(s), &last)
			}
			merged := applyMerge(cur, last, want)
			if reflect.DeepEqual(merged, cur) {
				continue
			}
			switch t.UpdateMethod {
			case "InPlace":
				if adopted[ref] {
					mc.cfg.Logf("metacontroller: %s: failed to update child due to outdated resourceVersion: %s (adopted by this sync)", key, ref)
					continue
				}
				_, changed, err := mc.api.Update(merged)
				if err != nil {
					mc.applyError(key, ref, "update", err)
					errs = append(errs, err)
					continue
				}
				if changed {
					mc.count(key, func(m *Metrics) { m.ChildUpdates++ })
				}
			case "Recreate":
				if err := mc.api.Delete(ref, nestedString(cur, "metadata", "uid")); err != nil && !errors.Is(err, ErrNotFound) {
					mc.applyError(key, ref, "delete", err)
					errs = append(errs, err)
					continue
				}
				mc.count(key, func(m *Metrics) { m.ChildDeletes++ })
			default: // OnDelete: existing children are left alone
			}
		}
	}
	return errors.Join(errs...)
}

// applyOrder is the order of child types in which manageChildren creates
// and updates: ApplyOrder first, then the rest of ChildTypes.
func (mc *Metacontroller) applyOrder() []string {
	order := slices.Clone(mc.cfg.ApplyOrder)
	for _, t := range mc.cfg.ChildTypes {
		if !slices.Contains(order, t.Key()) {
			order = append(order, t.Key())
		}
	}
	return order
}
