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

const parentUID = "parent-uid"

// ownedBy is an ownerReferences entry to an EtcdCluster.
func ownedBy(name, uid string, controller bool) map[string]any {
	r := map[string]any{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster", "name": name, "uid": uid}
	if controller {
		r["controller"], r["blockOwnerDeletion"] = true, true
	}
	return r
}

// claimService is a Service with the given controller-uid label ("" for
// none) and ownerReferences.
func claimService(name, label string, owners ...map[string]any) Object {
	md := map[string]any{"name": name, "namespace": ns}
	if label != "" {
		md["labels"] = map[string]any{LabelControllerUID: label}
	}
	if len(owners) > 0 {
		list := make([]any, len(owners))
		for i, o := range owners {
			list[i] = o
		}
		md["ownerReferences"] = list
	}
	return Object{"apiVersion": "v1", "kind": "Service", "metadata": md,
		"spec": map[string]any{"ports": []any{map[string]any{"name": "client", "port": 2379}}}}
}

func TestClaimActionFor(t *testing.T) {
	terminating := func(o Object) Object {
		ensureMap(o, "metadata")["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		return o
	}
	tests := []struct {
		reason   string
		obj      Object
		deleting bool
		want     claimAction
	}{
		{"controlled by the parent and labelled: a child", claimService("a", parentUID, ownedBy("p", parentUID, true)), false, claimKeep},
		{"a child stays one while the parent is being deleted", claimService("a", parentUID, ownedBy("p", parentUID, true)), true, claimKeep},
		{"controlled by the parent, no label (a CoreOS object): released", claimService("a", "", ownedBy("p", parentUID, true)), false, claimRelease},
		{"controlled by the parent, another parent's label: released", claimService("a", "other", ownedBy("p", parentUID, true)), false, claimRelease},
		{"no release while the parent is being deleted", claimService("a", "", ownedBy("p", parentUID, true)), true, claimIgnore},
		{"an orphan with the label: adopted", claimService("a", parentUID), false, claimAdopt},
		{"a non-controller reference to the parent leaves it an orphan: adopted", claimService("a", parentUID, ownedBy("p", parentUID, false)), false, claimAdopt},
		{"no adoption while the parent is being deleted", claimService("a", parentUID), true, claimIgnore},
		{"no adoption of an orphan being deleted", terminating(claimService("a", parentUID)), false, claimIgnore},
		{"an orphan without the label: not ours", claimService("a", ""), false, claimIgnore},
		{"controlled by another owner, even with the label: ignored", claimService("a", parentUID, ownedBy("q", "other", true)), false, claimIgnore},
		{"the first controller reference is the one that counts", claimService("a", parentUID, ownedBy("q", "other", true), ownedBy("p", parentUID, true)), false, claimIgnore},
	}
	for _, tt := range tests {
		if got := claimActionFor(tt.obj, parentUID, tt.deleting); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.reason, got, tt.want)
		}
	}
}

// claimFixture is a parent, not synced by anyone, and a Metacontroller
// whose claims the test drives.
func claimFixture(t *testing.T) (*APIServer, *Metacontroller, Object) {
	t.Helper()
	api := NewAPIServer()
	mc, err := NewMetacontroller(api, ControllerConfig{SyncURL: "http://127.0.0.1:1/sync", FinalizeURL: "http://127.0.0.1:1/finalize"})
	if err != nil {
		t.Fatal(err)
	}
	parent, err := mc.CreateParent(ns, "p", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	return api, mc, parent
}

func ownerRefsOf(api *APIServer, typ, name string) any {
	o, _ := api.Get(Ref{Type: typ, Namespace: ns, Name: name})
	return nestedMapValue(o, "metadata", "ownerReferences")
}

// TestClaimChildren: one claim over objects of every kind, then the
// store and the request's children as Metacontroller v4.17.2 leaves them.
func TestClaimChildren(t *testing.T) {
	api, mc, parent := claimFixture(t)
	uid := nestedString(parent, "metadata", "uid")
	other := ownedBy("someone", "other-uid", false)
	for _, o := range []Object{
		claimService("kept", uid, ownedBy("p", uid, true)),
		claimService("released", "", other, ownedBy("p", uid, true)),
		claimService("relabelled", "another-parent", ownedBy("p", uid, true)),
		claimService("adopted", uid),
		claimService("adopted-ref", uid, ownedBy("p", uid, false)),
		claimService("foreign", uid, ownedBy("q", "other-uid", true)),
		claimService("stray", ""),
		// The CoreOS operator's Pods: its owner reference, no label.
		CoreOSMemberPod("p", ns, "p-unlabelled", "3.6.16", nil, "new", "t", CoreOSOwnerRef(parent), ""),
		CoreOSMemberPod("p", ns, "p-labelled", "3.6.16", nil, "new", "t", CoreOSOwnerRef(parent), ""),
	} {
		if nestedString(o, "metadata", "name") == "p-labelled" {
			ensureMap(o, "metadata", "labels")[LabelControllerUID] = uid
		}
		mustCreate(t, api, o)
	}
	before := map[string]Object{}
	for _, typ := range []string{TypeService, TypePod} {
		for _, o := range api.List(typ, ns) {
			before[nestedString(o, "metadata", "name")] = o
		}
	}
	names := func(children map[string]map[string]Object) map[string][]string {
		out := map[string][]string{}
		for typ, m := range children {
			if len(m) > 0 {
				out[typ] = sortedKeys(m)
			}
		}
		return out
	}
	wantChildren := map[string][]string{TypeService: {"adopted", "adopted-ref", "kept"}, TypePod: {"p-labelled"}}
	if diff := cmp.Diff(wantChildren, names(mc.observedChildren(parent))); diff != "" {
		t.Errorf("the next request, before any claim (-want +got):\n%s", diff)
	}

	children, adopted, err := mc.claimChildren(parent, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantChildren, names(children)); diff != "" {
		t.Errorf("the request's children (-want +got):\n%s", diff)
	}
	wantAdopted := map[Ref]bool{{Type: TypeService, Namespace: ns, Name: "adopted"}: true, {Type: TypeService, Namespace: ns, Name: "adopted-ref"}: true}
	if diff := cmp.Diff(wantAdopted, adopted); diff != "" {
		t.Errorf("adopted (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before["adopted"], children[TypeService]["adopted"]); diff != "" {
		t.Errorf("an adopted child shows in the request as it was read, before its adoption (-want +got):\n%s", diff)
	}
	ctrl := ownedBy("p", uid, true)
	tests := []struct {
		reason, typ, name string
		want              any
	}{
		{"a child keeps its references", TypeService, "kept", []any{ctrl}},
		{"released: the parent's reference gone, the others kept", TypeService, "released", []any{other}},
		{"released for another parent's label: no reference left", TypeService, "relabelled", nil},
		{"adopted: a controller reference with blockOwnerDeletion", TypeService, "adopted", []any{ctrl}},
		{"adopted: the parent's plain reference replaced by the controller one", TypeService, "adopted-ref", []any{ctrl}},
		{"another controller's object is left alone", TypeService, "foreign", []any{ownedBy("q", "other-uid", true)}},
		{"a stray object is left alone", TypeService, "stray", nil},
		{"the CoreOS Pod without the label is released", TypePod, "p-unlabelled", nil},
		{"the CoreOS Pod with the label stays, with its reference (AsOwner's: no blockOwnerDeletion)", TypePod, "p-labelled", []any{
			map[string]any{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster", "name": "p", "uid": uid, "controller": true}}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, ownerRefsOf(api, tt.typ, tt.name)); diff != "" {
			t.Errorf("%s: ownerReferences (-want +got):\n%s", tt.reason, diff)
		}
	}
	if m := mc.Metrics(ns, "p"); m.ChildAdoptions != 2 || m.ChildReleases != 3 {
		t.Errorf("metrics %+v, want 2 adoptions and 3 releases", m)
	}

	// The next claim finds everything in place: nothing changes.
	rv := func() map[string]string {
		out := map[string]string{}
		for _, typ := range []string{TypeService, TypePod} {
			for _, o := range api.List(typ, ns) {
				out[nestedString(o, "metadata", "name")] = nestedString(o, "metadata", "resourceVersion")
			}
		}
		return out
	}
	rv1 := rv()
	children, adopted, err = mc.claimChildren(parent, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantChildren, names(children)); diff != "" {
		t.Errorf("the second claim's children (-want +got):\n%s", diff)
	}
	if len(adopted) != 0 {
		t.Errorf("the second claim adopted %v", adopted)
	}
	if diff := cmp.Diff(rv1, rv()); diff != "" {
		t.Errorf("the second claim changed objects (resourceVersions -before +after):\n%s", diff)
	}
}

// TestClaimParentDeleted: a parent being deleted keeps its children but
// releases and adopts nothing; one whose fresh read shows it deleted,
// while the sync's copy does not, cannot adopt, and the claim fails.
func TestClaimParentDeleted(t *testing.T) {
	api, mc, parent := claimFixture(t)
	uid := nestedString(parent, "metadata", "uid")
	mustCreate(t, api, claimService("kept", uid, ownedBy("p", uid, true)))
	mustCreate(t, api, claimService("unlabelled", "", ownedBy("p", uid, true)))
	mustCreate(t, api, claimService("orphan", uid))
	if _, err := api.Mutate(RefOf(parent), func(o Object) error { setFinalizers(o, []string{mc.Finalizer()}); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := mc.DeleteParent(ns, "p"); err != nil {
		t.Fatal(err)
	}
	deleting, _ := mc.Parent(ns, "p")
	children, _, err := mc.claimChildren(deleting, true)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"kept"}, sortedKeys(children[TypeService])); diff != "" {
		t.Errorf("children of a parent being deleted (-want +got):\n%s", diff)
	}
	if refs := ownerRefsOf(api, TypeService, "unlabelled"); refs == nil {
		t.Error("released while the parent is being deleted")
	}
	if refs := ownerRefsOf(api, TypeService, "orphan"); refs != nil {
		t.Errorf("adopted while the parent is being deleted: %v", refs)
	}

	// The copy the sync works from predates the deletion: the adoption's
	// fresh read refuses.
	_, _, err = mc.claimChildren(parent, true)
	if err == nil || !strings.Contains(err.Error(), "can't claim Service children") || !strings.Contains(err.Error(), "has just been deleted") {
		t.Errorf("claim with a stale parent: %v, want can't claim Service children ... has just been deleted", err)
	}
	if refs := ownerRefsOf(api, TypeService, "orphan"); refs != nil {
		t.Errorf("adopted by a parent being deleted: %v", refs)
	}
}

// adoptHook keeps the Services in keep that its request shows, labelled
// tier: x, always asks for a Service named foreign, and records what each
// request showed.
type adoptHook struct {
	srv  *httptest.Server
	keep map[string]bool

	mu   sync.Mutex
	seen []map[string]Object // the Services of each request
}

func newAdoptHook(t *testing.T, keep ...string) *adoptHook {
	h := &adoptHook{keep: map[string]bool{}}
	for _, k := range keep {
		h.keep[k] = true
	}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Children map[string]map[string]Object `json:"children"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.seen = append(h.seen, req.Children[TypeService])
		h.mu.Unlock()
		children := []any{claimService("foreign", "")}
		for name := range req.Children[TypeService] {
			if h.keep[name] {
				s := claimService(name, "")
				ensureMap(s, "metadata")["labels"] = map[string]any{"tier": "x"}
				children = append(children, s)
			}
		}
		writeJSON(w, map[string]any{"status": map[string]any{}, "children": children, "finalized": true})
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *adoptHook) requests() []map[string]Object {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]map[string]Object(nil), h.seen...)
}

// TestClaimSync: claims in Metacontroller's syncs. A create whose name is
// taken is skipped without error; an object controlled by the parent
// without its label is released and never shown to the hook; an orphan
// with the label is adopted, shown as it was read, and its update waits
// for the sync its adoption brings (the first one conflicts).
func TestClaimSync(t *testing.T) {
	hook := newAdoptHook(t, "adopted")
	api := NewAPIServer()
	var logMu sync.Mutex
	var logs []string
	mc, err := NewMetacontroller(api, ControllerConfig{SyncURL: hook.srv.URL + "/sync", FinalizeURL: hook.srv.URL + "/finalize",
		ResyncPeriod: -1, BackoffMax: 100 * time.Millisecond,
		Logf: func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			logs = append(logs, fmt.Sprintf(format, args...))
		}})
	if err != nil {
		t.Fatal(err)
	}
	mc.Start(t.Context())
	defer mc.Stop()
	foreign := mustCreate(t, api, claimService("foreign", "", ownedBy("q", "other-uid", true)))
	parent, err := mc.CreateParent(ns, "p", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	uid := nestedString(parent, "metadata", "uid")
	waitUntil(t, 10*time.Second, "the create of foreign skipped", func() (bool, string) {
		m := mc.Metrics(ns, "p")
		return m.ChildCreatesExisting > 0, fmt.Sprintf("%+v", m)
	})
	mustCreate(t, api, claimService("released", "", ownedBy("p", uid, true)))
	orphan := mustCreate(t, api, claimService("adopted", uid))
	waitUntil(t, 10*time.Second, "released, adopted and updated", func() (bool, string) {
		a, _ := api.Get(Ref{Type: TypeService, Namespace: ns, Name: "adopted"})
		r, _ := api.Get(Ref{Type: TypeService, Namespace: ns, Name: "released"})
		return nestedString(a, "metadata", "labels", "tier") == "x" && controllerOwnerUID(a) == uid && nestedMapValue(r, "metadata", "ownerReferences") == nil,
			fmt.Sprint(nestedMapValue(a, "metadata"), nestedMapValue(r, "metadata", "ownerReferences"))
	})
	waitUntil(t, 10*time.Second, "a request showing the update", func() (bool, string) {
		reqs := hook.requests()
		last := reqs[len(reqs)-1]["adopted"]
		return nestedString(last, "metadata", "labels", "tier") == "x", fmt.Sprint(nestedMapValue(last, "metadata"))
	})

	type view struct {
		Shown   bool
		Owned   bool // with the controller reference
		Labeled bool // with tier: x
	}
	var views []view
	for _, req := range hook.requests() {
		if _, ok := req["released"]; ok {
			t.Error("a request showed the released Service")
		}
		if _, ok := req["foreign"]; ok {
			t.Error("a request showed another controller's Service")
		}
		a, ok := req["adopted"]
		if !ok {
			continue
		}
		v := view{Shown: true, Owned: controllerOwnerUID(a) == uid, Labeled: nestedString(a, "metadata", "labels", "tier") == "x"}
		if len(views) == 0 || views[len(views)-1] != v {
			views = append(views, v)
		}
	}
	want := []view{{Shown: true}, {Shown: true, Owned: true}, {Shown: true, Owned: true, Labeled: true}}
	if diff := cmp.Diff(want, views); diff != "" {
		t.Errorf("the adopted Service in successive requests: first as read, then owned, then updated (-want +got):\n%s", diff)
	}
	if a, _ := api.Get(RefOf(orphan)); nestedString(a, "metadata", "uid") != nestedString(orphan, "metadata", "uid") {
		t.Error("the adopted Service was replaced, not adopted")
	}
	if f, _ := api.Get(RefOf(foreign)); nestedString(f, "metadata", "resourceVersion") != nestedString(foreign, "metadata", "resourceVersion") {
		t.Errorf("another controller's Service changed: %v", f)
	}
	if errs := mc.ApplyErrors(); len(errs) != 0 {
		t.Errorf("apply errors %v, want none: AlreadyExists and the adoption's conflict are logged, not errors", errs)
	}
	m := mc.Metrics(ns, "p")
	if m.ChildAdoptions != 1 || m.ChildReleases != 1 || m.ChildUpdates != 1 || m.ChildCreates != 0 || m.HookErrors != 0 {
		t.Errorf("metrics %+v, want 1 adoption, 1 release, 1 update, no create, no hook error", m)
	}
	logMu.Lock()
	joined := strings.Join(logs, "\n")
	logMu.Unlock()
	for _, want := range []string{"failed to create child, child object already exists", "failed to update child due to outdated resourceVersion"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the log lacks %q:\n%s", want, joined)
		}
	}
}
