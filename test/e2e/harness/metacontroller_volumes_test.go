package harness

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// claimHook answers every sync with the claims it is told to render, and
// remembers the claims and StorageClasses each request showed.
type claimHook struct {
	srv *httptest.Server

	mu     sync.Mutex
	claims map[string][2]string // name -> size, class
	rules  map[string][]any     // parent name -> customize rules
	seen   []claimHookCall
}

type claimHookCall struct {
	Parent     string            // namespace/name
	Capacities map[string]string // claim -> status.capacity.storage
	Classes    []string          // keys of the related StorageClasses; nil when the group is absent
}

func newClaimHook(t *testing.T) *claimHook {
	h := &claimHook{claims: map[string][2]string{}, rules: map[string][]any{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Parent   Object                       `json:"parent"`
			Children map[string]map[string]Object `json:"children"`
			Related  map[string]map[string]Object `json:"related"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		name := nestedString(req.Parent, "metadata", "name")
		if r.URL.Path == "/customize" {
			writeJSON(w, map[string]any{"relatedResources": h.rules[name]})
			return
		}
		call := claimHookCall{Parent: nestedString(req.Parent, "metadata", "namespace") + "/" + name, Capacities: map[string]string{}}
		for n, c := range req.Children[TypePVC] {
			call.Capacities[n] = nestedString(c, "status", "capacity", "storage")
		}
		if classes, ok := req.Related[TypeStorageClass]; ok {
			call.Classes = sortedKeys(classes)
		}
		h.seen = append(h.seen, call)
		var children []any
		for _, n := range sortedKeys(h.claims) {
			c := h.claims[n]
			children = append(children, claimObject("", n, c[0], c[1]))
		}
		writeJSON(w, map[string]any{"status": map[string]any{}, "children": children, "finalized": true})
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *claimHook) set(name, size, class string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.claims[name] = [2]string{size, class}
}

func (h *claimHook) calls(parent string) []claimHookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []claimHookCall
	for _, c := range h.seen {
		if parent == "" || c.Parent == parent {
			out = append(out, c)
		}
	}
	return out
}

// TestInPlaceClaimResize: with the PVC child type InPlace, a larger request
// in the hook's answer is applied to the existing claim by the three-way
// merge; the claim grows, and its status changes sync the parent. Requests
// the API server refuses are apply errors with its message.
func TestInPlaceClaimResize(t *testing.T) {
	api := NewAPIServer()
	vc := NewVolumeController(api, VolumeConfig{ResizeDelay: 100 * time.Millisecond})
	vc.Start(t.Context())
	defer vc.Stop()
	mustCreate(t, api, StorageClassObject("fast", StorageClassOptions{AllowVolumeExpansion: true}))
	mustCreate(t, api, StorageClassObject("fixed", StorageClassOptions{}))
	hook := newClaimHook(t)
	mc, err := NewMetacontroller(api, ControllerConfig{SyncURL: hook.srv.URL + "/sync", FinalizeURL: hook.srv.URL + "/finalize",
		ResyncPeriod: -1, BackoffMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mc.Start(t.Context())
	defer mc.Stop()
	hook.set("a", "1Gi", "fast")
	hook.set("b", "1Gi", "fixed")
	if _, err := mc.CreateParent(ns, "c", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	capacities := func() string {
		var out []string
		for _, n := range []string{"a", "b"} {
			pvc, _ := api.Get(Ref{Type: TypePVC, Namespace: ns, Name: n})
			out = append(out, n+"="+nestedString(pvc, "spec", "resources", "requests", "storage")+"/"+nestedString(pvc, "status", "capacity", "storage"))
		}
		return strings.Join(out, " ")
	}
	waitUntil(t, 10*time.Second, "the claims", func() (bool, string) {
		c := capacities()
		return c == "a=1Gi/1Gi b=1Gi/1Gi", c
	})

	hook.set("a", "2Gi", "fast")
	mc.Enqueue(ns, "c")
	waitUntil(t, 10*time.Second, "claim a grown", func() (bool, string) {
		c := capacities()
		return c == "a=2Gi/2Gi b=1Gi/1Gi", c
	})
	waitUntil(t, 10*time.Second, "a sync that sees a grown", func() (bool, string) {
		calls := hook.calls(ns + "/c")
		last := calls[len(calls)-1].Capacities
		return last["a"] == "2Gi", fmt.Sprint(last)
	})
	if m := mc.Metrics(ns, "c"); m.ChildUpdates != 1 || m.ApplyErrors != 0 {
		t.Errorf("metrics %+v, want one child update and no apply error", m)
	}
	if errs := mc.TakeApplyErrors(); len(errs) != 0 {
		t.Errorf("apply errors: %v", errs)
	}

	tests := []struct {
		name, reason string
		claim        string
		size, class  string // the claim the hook answers
		want         string // the apply error
	}{
		{name: "class without expansion", reason: "the resize admission refuses a class without allowVolumeExpansion",
			claim: "b", size: "2Gi", class: "fixed",
			want: `update PersistentVolumeClaim.v1 default/b: invalid: persistentvolumeclaims "b" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize`},
		{name: "shrink", reason: "validation refuses a request at or below the capacity",
			claim: "a", size: "1Gi", class: "fast",
			want: `update PersistentVolumeClaim.v1 default/a: invalid: PersistentVolumeClaim "a" is invalid: spec.resources.requests.storage: Forbidden: field can not be less than status.capacity`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, refused := capacities(), len(mc.ApplyErrors())
			old := hook.claims[tt.claim]
			hook.set(tt.claim, tt.size, tt.class)
			mc.Enqueue(ns, "c")
			waitUntil(t, 10*time.Second, "an apply error", func() (bool, string) {
				return len(mc.ApplyErrors()) > refused, "none"
			})
			hook.set(tt.claim, old[0], old[1])
			mc.Enqueue(ns, "c")
			time.Sleep(300 * time.Millisecond) // a retry may still be under way
			errs := mc.TakeApplyErrors()
			if len(errs) == 0 {
				t.Fatalf("%s: no apply error", tt.reason)
			}
			for _, e := range errs {
				got := []string{e.Op, e.Child.String(), e.Err.Error()}
				if d := cmp.Diff([]string{"update", "PersistentVolumeClaim.v1 default/" + tt.claim, tt.want}, got); d != "" {
					t.Errorf("%s: apply error (-want +got):\n%s", tt.reason, d)
				}
			}
			if after := capacities(); after != before {
				t.Errorf("%s: claims %s after the refusal, want %s", tt.reason, after, before)
			}
		})
	}
}

// TestRelatedStorageClasses: StorageClasses are cluster-scoped, and a
// namespaced parent's related rule lists them cluster-wide (Metacontroller
// v4.15+), keyed by name, the group present whenever the rule was asked
// for; a change of a class syncs the parents of every namespace that
// related the type, and only those.
func TestRelatedStorageClasses(t *testing.T) {
	api := NewAPIServer()
	mustCreate(t, api, StorageClassObject("fast", StorageClassOptions{AllowVolumeExpansion: true, Labels: map[string]string{"tier": "fast"}}))
	mustCreate(t, api, StorageClassObject("standard", StorageClassOptions{Default: true}))
	hook := newClaimHook(t)
	rule := func(extra string) any {
		return obj(`{"apiVersion":"storage.k8s.io/v1","resource":"storageclasses"` + extra + `}`)
	}
	tests := []struct {
		parent, reason string
		rules          []any
		want           []string // nil: no group
	}{
		{"all", "an empty selector selects every class", []any{rule(`,"labelSelector":{}`)}, []string{"fast", "standard"}},
		{"labels", "a selector selects by the classes' labels", []any{rule(`,"labelSelector":{"matchLabels":{"tier":"fast"}}`)}, []string{"fast"}},
		{"names", "names select those that exist", []any{rule(`,"names":["standard","nope"]`)}, []string{"standard"}},
		{"names-namespace", "a rule's namespace means nothing to a cluster-scoped resource", []any{rule(`,"namespace":"elsewhere","names":["fast"]`)}, []string{"fast"}},
		{"none", "the group is present, empty, when nothing matches", []any{rule(`,"names":["nope"]`)}, []string{}},
		{"unrelated", "a parent that relates no class gets no group",
			[]any{obj(`{"apiVersion":"v1","resource":"secrets","labelSelector":{}}`)}, nil},
	}
	for _, tt := range tests {
		hook.rules[tt.parent] = tt.rules
	}
	mc, err := NewMetacontroller(api, ControllerConfig{SyncURL: hook.srv.URL + "/sync", FinalizeURL: hook.srv.URL + "/finalize",
		CustomizeURL: hook.srv.URL + "/customize", ResyncPeriod: -1, BackoffMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mc.Start(t.Context())
	defer mc.Stop()
	for _, tt := range tests {
		if _, err := mc.CreateParent("ns-"+tt.parent, tt.parent, map[string]any{}); err != nil {
			t.Fatal(err)
		}
	}
	settle := func() {
		t.Helper()
		n, quiet := len(hook.calls("")), time.Now()
		waitUntil(t, 10*time.Second, "the syncs to settle", func() (bool, string) {
			if m := len(hook.calls("")); m != n {
				n, quiet = m, time.Now()
			}
			return time.Since(quiet) > 300*time.Millisecond, fmt.Sprint(n, " calls")
		})
	}
	settle()
	counts := map[string]int{}
	for _, tt := range tests {
		calls := hook.calls("ns-" + tt.parent + "/" + tt.parent)
		if len(calls) == 0 {
			t.Fatalf("%s: never synced", tt.parent)
		}
		counts[tt.parent] = len(calls)
		if d := cmp.Diff(tt.want, calls[len(calls)-1].Classes); d != "" {
			t.Errorf("%s: %s: related StorageClasses (-want +got):\n%s", tt.parent, tt.reason, d)
		}
	}

	// A class changes: every parent that related StorageClasses syncs,
	// whatever its namespace and whether the class matched its rule.
	cur, _ := api.Get(Ref{Type: TypeStorageClass, Name: "standard"})
	cur["allowVolumeExpansion"] = true
	if _, _, err := api.Update(cur); err != nil {
		t.Fatal(err)
	}
	settle()
	for _, tt := range tests {
		synced := len(hook.calls("ns-"+tt.parent+"/"+tt.parent)) > counts[tt.parent]
		if synced != (tt.want != nil) {
			t.Errorf("%s: synced after a class changed: %v, want %v", tt.parent, synced, tt.want != nil)
		}
	}
}
