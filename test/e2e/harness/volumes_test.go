package harness

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// noClass leaves spec.storageClassName out of a claim.
const noClass = "<unset>"

// claimObject is a claim of the given size; class noClass leaves
// spec.storageClassName out, "" sets it empty.
func claimObject(namespace, name, size, class string) Object {
	spec := map[string]any{
		"accessModes": []any{"ReadWriteOnce"},
		"resources":   map[string]any{"requests": map[string]any{"storage": size}},
	}
	if class != noClass {
		spec["storageClassName"] = class
	}
	return Object{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
		"metadata": map[string]any{"name": name, "namespace": namespace}, "spec": spec}
}

func mustCreate(t *testing.T, api *APIServer, o Object) Object {
	t.Helper()
	out, err := api.Create(o)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// setClaimRequest raises (or lowers) a claim's storage request, as a PUT.
func setClaimRequest(api *APIServer, namespace, name, size string) error {
	pvc, ok := api.Get(Ref{Type: TypePVC, Namespace: namespace, Name: name})
	if !ok {
		return ErrNotFound
	}
	ensureMap(pvc, "spec", "resources", "requests")["storage"] = size
	_, _, err := api.Update(pvc)
	return err
}

func claimClassOf(pvc Object) string {
	v, ok := nested(pvc, "spec", "storageClassName")
	if !ok {
		return noClass
	}
	s, _ := v.(string)
	return s
}

// TestDefaultStorageClass: the DefaultStorageClass admission plugin gives
// the default class to a claim that names none, and only to it.
func TestDefaultStorageClass(t *testing.T) {
	type class struct {
		name string
		opts StorageClassOptions
		age  time.Duration // created this long before the claim
	}
	tests := []struct {
		name, reason string
		classes      []class
		claimClass   string
		annotation   string // the beta storage-class annotation, if set
		want         string
	}{
		{name: "no default class", reason: "without a default class a claim keeps no class",
			classes: []class{{name: "fast"}}, claimClass: noClass, want: noClass},
		{name: "default class", reason: "a claim that names no class gets the default one",
			classes: []class{{name: "fast"}, {name: "standard", opts: StorageClassOptions{Default: true}}}, claimClass: noClass, want: "standard"},
		{name: "explicit empty class", reason: `storageClassName "" asks for no class and stays`,
			classes: []class{{name: "standard", opts: StorageClassOptions{Default: true}}}, claimClass: "", want: ""},
		{name: "explicit class", reason: "a named class is kept",
			classes: []class{{name: "fast"}, {name: "standard", opts: StorageClassOptions{Default: true}}}, claimClass: "fast", want: "fast"},
		{name: "beta annotation", reason: "the beta annotation names a class too: the plugin leaves the claim alone",
			classes: []class{{name: "standard", opts: StorageClassOptions{Default: true}}}, claimClass: noClass, annotation: "fast", want: noClass},
		{name: "newest default wins", reason: "of several default classes the newest one is chosen",
			classes:    []class{{name: "a-old", opts: StorageClassOptions{Default: true}, age: time.Hour}, {name: "z-new", opts: StorageClassOptions{Default: true}, age: time.Minute}},
			claimClass: noClass, want: "z-new"},
		{name: "equal age, by name", reason: "default classes of the same age are taken by name",
			classes:    []class{{name: "b", opts: StorageClassOptions{Default: true}}, {name: "a", opts: StorageClassOptions{Default: true}}},
			claimClass: noClass, want: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := NewAPIServer()
			base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
			for _, c := range tt.classes {
				api.now = func() time.Time { return base.Add(-c.age) }
				mustCreate(t, api, StorageClassObject(c.name, c.opts))
			}
			api.now = func() time.Time { return base }
			o := claimObject(ns, "data", "1Gi", tt.claimClass)
			if tt.annotation != "" {
				ensureMap(o, "metadata", "annotations")[betaStorageClassAnnotation] = tt.annotation
			}
			got := claimClassOf(mustCreate(t, api, o))
			if got != tt.want {
				t.Errorf("%s: storageClassName = %q, want %q", tt.reason, got, tt.want)
			}
		})
	}
}

// TestStorageClassObject: a StorageClass is cluster-scoped, defaulted as by
// the API server, and immutable but for allowVolumeExpansion.
func TestStorageClassObject(t *testing.T) {
	api := NewAPIServer()
	o := StorageClassObject("slow", StorageClassOptions{Default: true, OfflineExpansion: true})
	ensureMap(o, "metadata")["namespace"] = "ignored"
	got := mustCreate(t, api, o)
	want := obj(`{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","provisioner":"harness.etcd-hook.dev/hostpath",
		"parameters":{"harness.etcd-hook.dev/expansion":"offline"},"reclaimPolicy":"Delete","volumeBindingMode":"Immediate",
		"metadata":{"name":"slow","annotations":{"storageclass.kubernetes.io/is-default-class":"true"}}}`)
	for _, k := range []string{"uid", "creationTimestamp", "generation", "resourceVersion"} {
		delete(nestedMap(got, "metadata"), k)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stored class (-want +got):\n%s", d)
	}
	if _, ok := api.Get(Ref{Type: TypeStorageClass, Name: "slow"}); !ok {
		t.Error("the class is not found by a Ref without namespace")
	}
	cur, _ := api.Get(Ref{Type: TypeStorageClass, Name: "slow"})
	cur["allowVolumeExpansion"] = true
	if _, _, err := api.Update(cur); err != nil {
		t.Errorf("allowing expansion: %v", err)
	}
	cur, _ = api.Get(Ref{Type: TypeStorageClass, Name: "slow"})
	cur["parameters"] = map[string]any{}
	if _, _, err := api.Update(cur); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "parameters: Invalid value: {}: field is immutable") {
		t.Errorf("changing parameters: err = %v, want parameters immutable", err)
	}
	if _, err := api.Create(obj(`{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"x"}}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("class without provisioner: err = %v, want ErrInvalid", err)
	}
}

// TestClaimProvisioning: a new claim is Bound at once to a volume of the
// size it asks for, whatever its class.
func TestClaimProvisioning(t *testing.T) {
	tests := []struct {
		name, reason, class string
	}{
		{"no class", "claims of existing tests name no class", noClass},
		{"existing class", "a claim of a class is provisioned by its driver", "fast"},
		{"missing class", "simplified: a cluster would leave it Pending", "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := NewAPIServer()
			mustCreate(t, api, StorageClassObject("fast", StorageClassOptions{AllowVolumeExpansion: true}))
			pvc := mustCreate(t, api, claimObject(ns, "data", "1Gi", tt.class))
			want := map[string]any{"phase": "Bound", "accessModes": []any{"ReadWriteOnce"}, "capacity": map[string]any{"storage": "1Gi"}}
			if d := cmp.Diff(want, nestedMap(pvc, "status")); d != "" {
				t.Errorf("%s: status (-want +got):\n%s", tt.reason, d)
			}
			if got := nestedString(pvc, "spec", "volumeName"); got != "pvc-"+nestedString(pvc, "metadata", "uid") {
				t.Errorf("%s: volumeName = %q", tt.reason, got)
			}
		})
	}
}

// TestClaimUpdateValidation: what the API server and the
// PersistentVolumeClaimResize plugin let through of a claim's update.
func TestClaimUpdateValidation(t *testing.T) {
	const (
		shrink    = `PersistentVolumeClaim "data" is invalid: spec.resources.requests.storage: Forbidden: field can not be less than status.capacity`
		immutable = `PersistentVolumeClaim "data" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims`
		noResize  = `persistentvolumeclaims "data" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize`
	)
	tests := []struct {
		name, reason string
		class        string
		size         string // the claim's size, 1Gi; status.capacity stays 1Gi
		pending      bool   // the claim is not Bound
		edit         func(pvc Object)
		want         string // "" for success, else the error's message from the API server
	}{
		{name: "grow, expandable class", reason: "a bound claim of a class with allowVolumeExpansion grows",
			class: "fast", edit: request("2Gi")},
		{name: "same size", reason: "a request that does not change is no resize", class: "fixed", edit: request("1Gi")},
		{name: "shrink below capacity", reason: "no request may go below status.capacity", class: "fast", edit: request("500Mi"), want: shrink},
		{name: "shrink to capacity", reason: "recovering from a failed expansion must stay above status.capacity",
			class: "fast", size: "2Gi", edit: request("1Gi"), want: shrink},
		{name: "shrink above capacity", reason: "recovering from a failed expansion to a size above status.capacity is allowed",
			class: "fast", size: "2Gi", edit: request("1536Mi")},
		{name: "grow, class without expansion", reason: "the resize plugin needs allowVolumeExpansion",
			class: "fixed", edit: request("2Gi"), want: noResize},
		{name: "grow, no class", reason: "only a dynamically provisioned claim can grow", class: noClass, edit: request("2Gi"), want: noResize},
		{name: "grow, empty class", reason: "an empty class is no class", class: "", edit: request("2Gi"), want: noResize},
		{name: "grow, missing class", reason: "the class must exist", class: "nope", edit: request("2Gi"), want: noResize},
		{name: "grow, not bound", reason: "only a bound claim's request may change", class: "fast", pending: true, edit: request("2Gi"), want: immutable},
		{name: "access modes", reason: "the rest of the spec is immutable", class: "fast",
			edit: func(o Object) { ensureMap(o, "spec")["accessModes"] = []any{"ReadWriteMany"} }, want: immutable},
		{name: "class set once", reason: "a claim created without class may get one",
			class: noClass, edit: func(o Object) { ensureMap(o, "spec")["storageClassName"] = "fast" }},
		{name: "class changed", reason: "a class, once set, is immutable",
			class: "fixed", edit: func(o Object) { ensureMap(o, "spec")["storageClassName"] = "fast" }, want: immutable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := NewAPIServer()
			mustCreate(t, api, StorageClassObject("fast", StorageClassOptions{AllowVolumeExpansion: true}))
			mustCreate(t, api, StorageClassObject("fixed", StorageClassOptions{}))
			pvc := mustCreate(t, api, claimObject(ns, "data", "1Gi", tt.class))
			ref := RefOf(pvc)
			if tt.size != "" {
				if err := setClaimRequest(api, ns, "data", tt.size); err != nil {
					t.Fatal(err)
				}
			}
			if tt.pending {
				if _, err := api.UpdateStatus(ref, "", map[string]any{"phase": "Pending"}); err != nil {
					t.Fatal(err)
				}
			}
			cur, _ := api.Get(ref)
			tt.edit(cur)
			_, _, err := api.Update(cur)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("%s: %v", tt.reason, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("%s: err = %v, want %q", tt.reason, err, tt.want)
			case err != nil && !errors.Is(err, ErrInvalid):
				t.Errorf("%s: %v does not wrap ErrInvalid", tt.reason, err)
			}
		})
	}
}

func request(size string) func(Object) {
	return func(o Object) { ensureMap(o, "spec", "resources", "requests")["storage"] = size }
}

// runningPod stores a Pod that uses the claim, with the status the kubelet
// publishes once it has mounted its volumes (started) or not yet.
func runningPod(t *testing.T, api *APIServer, name, claim string, started bool) Ref {
	t.Helper()
	pod := mustCreate(t, api, obj(fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"namespace":%q},
		"spec":{"containers":[{"name":"etcd","image":"e"}],"volumes":[{"name":"data","persistentVolumeClaim":{"claimName":%q}}]}}`, name, ns, claim)))
	if started {
		st := map[string]any{"phase": "Running", "startTime": timestamp(time.Now()), "podIP": "127.0.9.9"}
		if _, err := api.UpdateStatus(RefOf(pod), "", st); err != nil {
			t.Fatal(err)
		}
	}
	return RefOf(pod)
}

func claimOf(t *testing.T, api *APIServer, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	o, ok := api.Get(Ref{Type: TypePVC, Namespace: ns, Name: name})
	if !ok {
		t.Fatalf("claim %s not found", name)
	}
	var pvc corev1.PersistentVolumeClaim
	if err := decodeInto(o, &pvc); err != nil {
		t.Fatal(err)
	}
	return &pvc
}

// resizeView is what a test compares of a claim's status.
type resizeView struct {
	Capacity, Allocated, State string
	Conditions                 []string // type=status: message
}

func viewOf(pvc *corev1.PersistentVolumeClaim) resizeView {
	v := resizeView{State: string(pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage])}
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		v.Capacity = q.String()
	}
	if q, ok := pvc.Status.AllocatedResources[corev1.ResourceStorage]; ok {
		v.Allocated = q.String()
	}
	for _, c := range pvc.Status.Conditions {
		v.Conditions = append(v.Conditions, fmt.Sprintf("%s=%s: %s", c.Type, c.Status, c.Message))
	}
	return v
}

var (
	resized        = resizeView{Capacity: "2Gi", Allocated: "2Gi"}
	pendingRemount = resizeView{Capacity: "1Gi", Allocated: "2Gi", State: "NodeResizePending",
		Conditions: []string{"FileSystemResizePending=True: " + fsResizePendingMessage}}
)

// TestVolumeResize: the controller side of a resize, with Pods whose
// status says whether the kubelet has mounted the claim. An online driver
// grows a claim in use by a running Pod, or by no Pod, at once; otherwise
// the claim waits FileSystemResizePending, which a running Pod ends for an
// online driver only.
func TestVolumeResize(t *testing.T) {
	const delay = 200 * time.Millisecond
	tests := []struct {
		name, reason string
		offline      bool
		pod          string // "", "running" or "pending" (not started by the kubelet)
		want         resizeView
		// then the Pod (created if there is none) is started, and the
		// claim is to be thenWant.
		thenWant resizeView
	}{
		{name: "online, running Pod", reason: "the kubelet grows a mounted volume online", pod: "running", want: resized, thenWant: resized},
		{name: "online, no Pod", reason: "a volume no Pod uses grows without a node", want: resized, thenWant: resized},
		{name: "online, Pod not started", reason: "a used volume that is not mounted waits for its mount; a running Pod ends it",
			pod: "pending", want: pendingRemount, thenWant: resized},
		{name: "offline, running Pod", reason: "an offline driver grows the file system only at the next mount, and a running Pod is no new mount",
			offline: true, pod: "running", want: pendingRemount, thenWant: pendingRemount},
		{name: "offline, no Pod", reason: "an offline driver needs a mount in any case, which is the kubelet's (TestResizeWithKubelet)",
			offline: true, want: pendingRemount, thenWant: pendingRemount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := NewAPIServer()
			vc := NewVolumeController(api, VolumeConfig{ResizeDelay: delay})
			vc.Start(t.Context())
			defer vc.Stop()
			mustCreate(t, api, StorageClassObject("fast", StorageClassOptions{AllowVolumeExpansion: true, OfflineExpansion: tt.offline}))
			mustCreate(t, api, claimObject(ns, "data", "1Gi", "fast"))
			var pod Ref
			if tt.pod != "" {
				pod = runningPod(t, api, "p", "data", tt.pod == "running")
			}
			// Events of concurrent writers may arrive out of order: they
			// are sorted by resourceVersion.
			var mu sync.Mutex
			events := map[int64]resizeView{}
			api.Subscribe(func(ev Event) {
				if ev.Ref.Type == TypePVC && ev.Type == Modified {
					var pvc corev1.PersistentVolumeClaim
					if decodeInto(ev.Object, &pvc) == nil {
						v := viewOf(&pvc)
						for i := range v.Conditions {
							v.Conditions[i], _, _ = strings.Cut(v.Conditions[i], ":")
						}
						rv, _ := strconv.ParseInt(pvc.ResourceVersion, 10, 64)
						mu.Lock()
						events[rv] = v
						mu.Unlock()
					}
				}
			})
			inOrder := func() []resizeView {
				mu.Lock()
				defer mu.Unlock()
				var out []resizeView
				for _, rv := range slices.Sorted(maps.Keys(events)) {
					out = append(out, events[rv])
				}
				return out
			}
			raised := time.Now()
			if err := setClaimRequest(api, ns, "data", "2Gi"); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "the resize to end", func() (bool, string) {
				v := viewOf(claimOf(t, api, "data"))
				return v.State != resizeControllerInProgress && v.Allocated != "", fmt.Sprintf("%+v", v)
			})
			if took := time.Since(raised); took < delay || took > delay+2*time.Second {
				t.Errorf("the driver took %s, want about %s", took, delay)
			}
			if d := cmp.Diff(tt.want, viewOf(claimOf(t, api, "data"))); d != "" {
				t.Errorf("%s: claim after the resize (-want +got):\n%s", tt.reason, d)
			}
			// Every step was an update event: first Resizing, with the
			// new size allocated. The store delivers an event once its
			// writer unlocks it, which may be after the read above saw the
			// outcome: the outcome's event is waited for (a bounded wait).
			for deadline := time.Now().Add(2 * time.Second); len(inOrder()) < 3 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if events := inOrder(); len(events) < 3 || events[1].State != resizeControllerInProgress || events[1].Allocated != "2Gi" ||
				len(events[1].Conditions) != 1 || events[1].Conditions[0] != "Resizing=True" {
				t.Errorf("%s: update events %+v, want the request, Resizing with 2Gi allocated, then the outcome", tt.reason, inOrder())
			}

			// The Pod starts (the kubelet mounts the claim), or a Pod
			// with the claim already mounted changes status (a container
			// restart): no new mount.
			if pod.Name == "" {
				pod = runningPod(t, api, "p", "data", true)
			} else {
				st := map[string]any{"phase": "Running", "startTime": timestamp(time.Now()), "podIP": "127.0.9.9",
					"containerStatuses": []any{map[string]any{"name": "etcd", "restartCount": 1}}}
				if _, err := api.UpdateStatus(pod, "", st); err != nil {
					t.Fatal(err)
				}
			}
			if tt.thenWant.State == "" {
				waitUntil(t, 5*time.Second, "the resize to end", func() (bool, string) {
					v := viewOf(claimOf(t, api, "data"))
					return cmp.Equal(tt.thenWant, v), fmt.Sprintf("%+v", v)
				})
			} else {
				time.Sleep(2 * delay)
			}
			if d := cmp.Diff(tt.thenWant, viewOf(claimOf(t, api, "data"))); d != "" {
				t.Errorf("%s: claim once a Pod runs (-want +got):\n%s", tt.reason, d)
			}
		})
	}
}

// TestFinishNodeExpansion: what the kubelet does to a claim when a new Pod
// mounts it: a claim waiting for its file system gets its capacity, the
// condition goes, other conditions stay; any other claim is left alone.
func TestFinishNodeExpansion(t *testing.T) {
	api := NewAPIServer()
	pvc := mustCreate(t, api, claimObject(ns, "data", "1Gi", noClass))
	ref, uid := RefOf(pvc), nestedString(pvc, "metadata", "uid")
	if ok, err := finishNodeExpansion(api, ref, uid); ok || err != nil {
		t.Errorf("a claim that waits for nothing: changed=%v err=%v", ok, err)
	}
	cond := func(typ string) map[string]any {
		return map[string]any{"type": typ, "status": "True", "lastTransitionTime": timestamp(time.Now())}
	}
	st := map[string]any{"phase": "Bound", "capacity": map[string]any{"storage": "1Gi"},
		"allocatedResources": map[string]any{"storage": "3Gi"}, "allocatedResourceStatuses": map[string]any{"storage": "NodeResizePending"},
		"conditions": []any{cond("Other"), cond("FileSystemResizePending")}}
	if _, err := api.UpdateStatus(ref, uid, st); err != nil {
		t.Fatal(err)
	}
	if ok, err := finishNodeExpansion(api, ref, uid); !ok || err != nil {
		t.Fatalf("finish: changed=%v err=%v", ok, err)
	}
	got := viewOf(claimOf(t, api, "data"))
	if d := cmp.Diff(resizeView{Capacity: "3Gi", Allocated: "3Gi", Conditions: []string{"Other=True: "}}, got); d != "" {
		t.Errorf("claim (-want +got):\n%s", d)
	}
	if _, err := finishNodeExpansion(api, ref, "other-uid"); !errors.Is(err, ErrNotFound) {
		t.Errorf("uid precondition: %v, want ErrNotFound", err)
	}
}

// TestResizeWithKubelet: with the kubelet and real etcd Pods, an online
// class grows the claim of a running member at once; an offline class
// leaves it FileSystemResizePending through a container restart, until a
// new Pod mounts it.
func TestResizeWithKubelet(t *testing.T) {
	requireEtcd(t, "3.6.16")
	env, _ := newEnvWithFake(t, Options{Volumes: VolumeConfig{ResizeDelay: 200 * time.Millisecond}})
	for name, offline := range map[string]bool{"online": false, "offline": true} {
		if err := env.CreateStorageClass(name, StorageClassOptions{AllowVolumeExpansion: true, OfflineExpansion: offline}); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, env.API, claimObject(ns, name+"-data", "1Gi", name))
	}
	memberPod := func(name, claim string) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "etcd", Image: "quay.io/coreos/etcd:v3.6.16", Args: []string{"--data-dir=/var/etcd/data",
					"--listen-client-urls=http://0.0.0.0:2379", "--advertise-client-urls=http://127.0.0.1:2379", "--listen-peer-urls=http://0.0.0.0:2380"},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/etcd"}}}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
			},
		}
	}
	createPod(t, env, memberPod("online-0", "online-data"))
	createPod(t, env, memberPod("offline-0", "offline-data"))
	for _, p := range []string{"online-0", "offline-0"} {
		_, err := env.WaitPodReady(ns, p, 30*time.Second)
		mustWait(t, err)
	}
	waitClaim := func(name string, want resizeView) {
		t.Helper()
		mustWait(t, env.WaitFor(10*time.Second, "claim "+name+" "+fmt.Sprint(want), func() (bool, string) {
			pvc, _ := env.Claim(ns, name)
			return cmp.Equal(want, viewOf(pvc)), ClaimSummary(pvc)
		}))
	}
	for _, c := range []string{"online-data", "offline-data"} {
		if err := setClaimRequest(env.API, ns, c, "2Gi"); err != nil {
			t.Fatal(err)
		}
	}
	waitClaim("online-data", resized)
	waitClaim("offline-data", pendingRemount)

	// A container restart mounts nothing again.
	if err := env.Kubelet.KillContainer(ns, "offline-0", "etcd"); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(30*time.Second, "restart after kill -9", func() (bool, string) {
		p, _ := env.Pod(ns, "offline-0")
		return restartCount(p) == 1 && podReady(p), PodSummary(p)
	}))
	time.Sleep(500 * time.Millisecond)
	if pvc, _ := env.Claim(ns, "offline-data"); !cmp.Equal(pendingRemount, viewOf(pvc)) {
		t.Errorf("after a container restart the claim is %s, want it still FileSystemResizePending", ClaimSummary(pvc))
	}

	// A new Pod mounts the claim: the file system grows.
	if err := env.DeletePod(ns, "offline-0"); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitPodGone(ns, "offline-0", 30*time.Second))
	if pvc, _ := env.Claim(ns, "offline-data"); !cmp.Equal(pendingRemount, viewOf(pvc)) {
		t.Errorf("with no Pod the claim is %s, want it still FileSystemResizePending", ClaimSummary(pvc))
	}
	createPod(t, env, memberPod("offline-1", "offline-data"))
	waitClaim("offline-data", resized)
	_, err := env.WaitPodReady(ns, "offline-1", 30*time.Second)
	mustWait(t, err)
	if ev := strings.Join(env.Kubelet.Events(), "\n"); !strings.Contains(ev, "volume of claim offline-data mounted: file system grown") {
		t.Errorf("kubelet events lack the mount that grew the file system:\n%s", ev)
	}
}
