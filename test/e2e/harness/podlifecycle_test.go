package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestEtcdPodLifecycle walks one real etcd Pod through the harness: start,
// readiness, DNS from the test process, crash and restart, deletion by a user,
// deletion by omission from the hook's answer, and Close leaving no process.
func TestEtcdPodLifecycle(t *testing.T) {
	requireEtcd(t, "3.6.16")
	env, fake := newEnvWithFake(t, Options{})
	ctx := env.Ctx()
	const cluster = "example"
	pod := cluster + "-0"

	created := time.Now()
	if _, err := env.MC.CreateParent(ns, cluster, map[string]any{"size": 1, "version": "3.6.16"}); err != nil {
		t.Fatal(err)
	}
	p, err := env.WaitPodReady(ns, pod, 30*time.Second)
	mustWait(t, err)
	t.Logf("pod created to Ready in %s", time.Since(created).Round(time.Millisecond))

	// The very first request already lists every declared child type.
	calls := fake.Calls(ns + "/" + cluster)
	if len(calls) == 0 {
		t.Fatal("the fake hook was never called")
	}
	first := map[string]int{}
	for k, v := range calls[0].Children {
		first[k] = len(v)
	}
	want := map[string]int{TypePod: 0, TypeService: 0, TypePVC: 0, TypePDB: 0, TypeSecret: 0, TypeNetPolicy: 0}
	if d := cmp.Diff(want, first); d != "" {
		t.Errorf("children of the first request (-want +got):\n%s", d)
	}

	parent, _ := env.MC.Parent(ns, cluster)
	uid := nestedString(parent, "metadata", "uid")
	if got := nestedString(p, "metadata", "labels", LabelControllerUID); got != uid {
		t.Errorf("pod label %s = %q, want the parent uid %q", LabelControllerUID, got, uid)
	}
	if controllerOwnerUID(p) != uid {
		t.Errorf("pod has no controller ownerReference to the parent: %v", nestedMapValue(p, "metadata", "ownerReferences"))
	}
	if nestedString(p, "metadata", "annotations", AnnotationLastApplied) == "" {
		t.Error("pod lacks the last-applied annotation")
	}
	if got := finalizersOf(parent); !containsString(got, env.MC.Finalizer()) {
		t.Errorf("parent finalizers %v lack %s", got, env.MC.Finalizer())
	}
	ip := nestedString(p, "status", "podIP")
	if !strings.HasPrefix(ip, "127.0.") || ip == "127.0.0.1" || strings.HasPrefix(ip, "127.0.0.") {
		t.Errorf("pod IP %q is not a private 127.0.x.y address", ip)
	}
	cs := nestedMapValue(p, "status", "containerStatuses").([]any)[0]
	gotCS := map[string]any{"ready": nestedMapValue(cs, "ready"), "restartCount": nestedMapValue(cs, "restartCount"),
		"image": nestedMapValue(cs, "image"), "running": nestedMapValue(cs, "state", "running") != nil}
	wantCS := map[string]any{"ready": true, "restartCount": float64(0), "image": "quay.io/coreos/etcd:v3.6.16", "running": true}
	if d := cmp.Diff(wantCS, gotCS); d != "" {
		t.Errorf("container status (-want +got):\n%s", d)
	}

	// DNS, from the test process itself.
	for _, name := range []string{pod + "." + cluster + ".default.svc", pod + "." + cluster + ".default.svc.cluster.local", cluster + "-client.default.svc"} {
		addrs, err := env.Resolve(ctx, name)
		if err != nil {
			t.Errorf("resolve %s: %v", name, err)
			continue
		}
		if d := cmp.Diff([]string{ip}, addrs); d != "" {
			t.Errorf("resolve %s (-want +got):\n%s", name, d)
		}
	}
	var dnsErr *net.DNSError
	if _, err := env.Resolve(ctx, "nobody."+cluster+".default.svc"); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("resolve of an unknown pod: got %v, want not found", err)
	}

	endpoint := fmt.Sprintf("http://%s.%s.default.svc:2379", pod, cluster)
	if err := etcdPut(ctx, endpoint, "greeting", "hello"); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(10*time.Second, "parent status", func() (bool, string) {
		par, _ := env.MC.Parent(ns, cluster)
		st := nestedMap(par, "status")
		return st["phase"] == "Running" && st["observedGeneration"] == float64(1), fmt.Sprint(st)
	}))
	mustWait(t, env.WaitFor(10*time.Second, "PDB status", func() (bool, string) {
		pdb, _ := env.API.Get(Ref{Type: TypePDB, Namespace: ns, Name: cluster})
		st := nestedMap(pdb, "status")
		return st["currentHealthy"] == float64(1) && st["disruptionsAllowed"] == float64(0), fmt.Sprint(st)
	}))

	// kill -9: the container restarts with the same emptyDir.
	pid1, err := env.Kubelet.ContainerPID(ns, pod, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Kubelet.KillContainer(ns, pod, "etcd"); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	mustWait(t, env.WaitFor(30*time.Second, "restart after kill -9", func() (bool, string) {
		p, _ := env.Pod(ns, pod)
		return restartCount(p) == 1 && podReady(p), PodSummary(p)
	}))
	t.Logf("kill -9 to Ready again in %s", time.Since(killed).Round(time.Millisecond))
	if pid2, _ := env.Kubelet.ContainerPID(ns, pod, "etcd"); pid2 == pid1 {
		t.Errorf("container pid unchanged after kill -9: %d", pid1)
	}
	if v, err := etcdGet(ctx, endpoint, "greeting"); err != nil || v != "hello" {
		t.Errorf("after restart: greeting = %q, %v; want hello", v, err)
	}
	var runs []ContainerRun
	for _, r := range env.Kubelet.ContainerRuns() {
		if r.Pod == pod {
			runs = append(runs, r)
		}
	}
	if len(runs) != 2 || runs[0].Instance != 1 || runs[1].Instance != 2 || runs[0].Pid != pid1 {
		t.Fatalf("container runs after kill -9: %+v, want instances 1 (pid %d) and 2", runs, pid1)
	}
	for _, r := range runs {
		if r.Ready.IsZero() || r.Ready.Before(r.Started) {
			t.Errorf("run %d: ready %v, started %v; want ready after start", r.Instance, r.Ready, r.Started)
		}
	}
	if runs[0].Exited.IsZero() || !runs[1].Exited.IsZero() || runs[1].Started.Before(runs[0].Exited) {
		t.Errorf("runs: first exited %v, second started %v and exited %v", runs[0].Exited, runs[1].Started, runs[1].Exited)
	}

	// SIGSTOP freezes the member, SIGCONT brings it back.
	if err := env.Kubelet.Pause(ns, pod, "etcd"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = etcdGet(short, endpoint, "greeting")
	cancel()
	if err == nil {
		t.Error("a paused etcd answered")
	}
	if err := env.Kubelet.Resume(ns, pod, "etcd"); err != nil {
		t.Fatal(err)
	}
	if v, err := etcdGet(ctx, endpoint, "greeting"); err != nil || v != "hello" {
		t.Errorf("after resume: greeting = %q, %v; want hello", v, err)
	}

	// A user deletes the Pod: SIGTERM, gone, and the hook gets it back.
	before, _ := env.Pod(ns, pod)
	if err := env.DeletePod(ns, pod); err != nil {
		t.Fatal(err)
	}
	if p, _ := env.Pod(ns, pod); !isTerminating(p) && nestedString(p, "metadata", "uid") == nestedString(before, "metadata", "uid") {
		t.Errorf("deleted pod has no deletionTimestamp: %s", PodSummary(p))
	}
	mustWait(t, env.WaitFor(30*time.Second, "pod recreated and Ready", func() (bool, string) {
		p, ok := env.Pod(ns, pod)
		return ok && nestedString(p, "metadata", "uid") != nestedString(before, "metadata", "uid") && podReady(p), PodSummary(p)
	}))

	// Children missing from an answer are deleted.
	pidBefore, _ := env.Kubelet.ContainerPID(ns, pod, "etcd")
	fake.set(func(f *fakeConfig) { f.noClient, f.noPods = true, true })
	env.MC.Enqueue(ns, cluster)
	mustWait(t, env.WaitFor(10*time.Second, "client service deleted", func() (bool, string) {
		_, ok := env.API.Get(Ref{Type: TypeService, Namespace: ns, Name: cluster + "-client"})
		return !ok, "still there"
	}))
	mustWait(t, env.WaitPodGone(ns, pod, 20*time.Second))
	if alive(pidBefore) {
		t.Errorf("etcd pid %d of the deleted pod still runs", pidBefore)
	}
	if _, err := env.Resolve(ctx, pod+"."+cluster+".default.svc"); err == nil {
		t.Error("a deleted pod still resolves")
	}
	if m := env.MC.Metrics(ns, cluster); m.ChildDeletes < 2 || m.HookErrors != 0 {
		t.Errorf("metrics: %+v, want >= 2 child deletions and no hook errors", m)
	}

	// Bring a Pod back, then check that Close leaves nothing behind.
	fake.set(func(f *fakeConfig) { f.noPods = false })
	env.MC.Enqueue(ns, cluster)
	_, err = env.WaitPodReady(ns, pod, 30*time.Second)
	mustWait(t, err)
	var pids []int
	for _, p := range env.Procs.Live() {
		pids = append(pids, p.Pid)
	}
	if len(pids) == 0 {
		t.Fatal("no live process before Close")
	}
	env.Close()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d survived Close", pid)
		}
	}
}

// TestImagePullAndImmutableUpdate: an image without a binary leaves the Pod
// Pending in ErrImagePull/ImagePullBackOff, and a change of an immutable Pod
// field is refused like the API server would and surfaced as an apply error.
func TestImagePullAndImmutableUpdate(t *testing.T) {
	env, fake := newEnvWithFake(t, Options{})
	fake.set(func(f *fakeConfig) { f.version = "9.9.9" })
	const cluster = "nopull"
	if _, err := env.MC.CreateParent(ns, cluster, map[string]any{"size": 1}); err != nil {
		t.Fatal(err)
	}
	mustWait(t, env.WaitFor(10*time.Second, "ImagePullBackOff", func() (bool, string) {
		p, _ := env.Pod(ns, cluster+"-0")
		return nestedString(p, "status", "phase") == "Pending" && waitingReason(p) == "ImagePullBackOff", PodSummary(p)
	}))
	if n := len(env.Procs.Live()); n != 0 {
		t.Errorf("%d processes run for a pod whose image cannot be pulled", n)
	}
	fake.set(func(f *fakeConfig) { f.restartPolicy = "Never" })
	env.MC.Enqueue(ns, cluster)
	mustWait(t, env.WaitFor(10*time.Second, "apply error", func() (bool, string) {
		return env.MC.Metrics(ns, cluster).ApplyErrors > 0, fmt.Sprintf("%+v", env.MC.Metrics(ns, cluster))
	}))
	errs := env.MC.TakeApplyErrors()
	if len(errs) == 0 || errs[0].Op != "update" || !errors.Is(errs[0].Err, ErrInvalid) || !strings.Contains(errs[0].Err.Error(), "Forbidden") {
		t.Fatalf("apply errors = %v, want a forbidden pod update", errs)
	}
	if p, _ := env.Pod(ns, cluster+"-0"); nestedString(p, "spec", "restartPolicy") != "Always" {
		t.Errorf("refused update changed the pod: restartPolicy %q", nestedString(p, "spec", "restartPolicy"))
	}
	// Back to a valid answer. Retries of the refused update may still be in
	// flight; syncs of one parent are serial, so once two syncs started after
	// the fix, the first has completed and no refusal can follow.
	fake.set(func(f *fakeConfig) { f.restartPolicy = "" })
	fixed := time.Now()
	for i := range 2 {
		env.MC.Enqueue(ns, cluster)
		mustWait(t, env.WaitFor(10*time.Second, "sync after the fix", func() (bool, string) {
			n := 0
			for _, r := range env.MC.Records(ns, cluster) {
				if r.Start.After(fixed) {
					n++
				}
			}
			return n > i, fmt.Sprint(n, " syncs")
		}))
	}
	env.MC.TakeApplyErrors()
}

func waitingReason(pod Object) string {
	list, _ := nestedMapValue(pod, "status", "containerStatuses").([]any)
	if len(list) == 0 {
		return ""
	}
	return nestedString(list[0], "state", "waiting", "reason")
}

func containerImage(pod Object) string {
	list, _ := nestedMapValue(pod, "status", "containerStatuses").([]any)
	if len(list) == 0 {
		return ""
	}
	return nestedString(list[0], "image")
}

// TestInPlaceUpgradeAndFinalize: an in-place image change restarts etcd on the
// new version with the same PVC data; deleting the parent runs the finalize
// hook until it says finalized, then everything is gone, PVC directory included.
func TestInPlaceUpgradeAndFinalize(t *testing.T) {
	requireEtcd(t, "3.5.35")
	requireEtcd(t, "3.6.16")
	env, fake := newEnvWithFake(t, Options{})
	fake.set(func(f *fakeConfig) { f.version, f.usePVC = "3.5.35", true })
	const cluster = "upgrade"
	pod := cluster + "-0"
	if _, err := env.MC.CreateParent(ns, cluster, map[string]any{"size": 1, "version": "3.5.35"}); err != nil {
		t.Fatal(err)
	}
	_, err := env.WaitPodReady(ns, pod, 30*time.Second)
	mustWait(t, err)
	ctx := env.Ctx()
	endpoint := fmt.Sprintf("http://%s.%s.default.svc:2379", pod, cluster)
	if v, err := etcdVersion(ctx, endpoint); err != nil || v != "3.5.35" {
		t.Fatalf("version = %q, %v; want 3.5.35", v, err)
	}
	if err := etcdPut(ctx, endpoint, "kept", "across-upgrade"); err != nil {
		t.Fatal(err)
	}
	pvc, ok := env.API.Get(Ref{Type: TypePVC, Namespace: ns, Name: pod + "-data"})
	if !ok || nestedString(pvc, "status", "phase") != "Bound" {
		t.Fatalf("pvc not bound: %v", pvc)
	}
	pvDir := env.Kubelet.pvDir(pvc)
	if _, err := os.Stat(filepath.Join(pvDir, "data", "member")); err != nil {
		t.Errorf("etcd data is not in the PVC directory: %v", err)
	}

	fake.set(func(f *fakeConfig) { f.version = "3.6.16" })
	env.MC.Enqueue(ns, cluster)
	upgraded := time.Now()
	mustWait(t, env.WaitFor(30*time.Second, "upgraded pod Ready", func() (bool, string) {
		p, _ := env.Pod(ns, pod)
		return restartCount(p) == 1 && podReady(p) && containerImage(p) == "quay.io/coreos/etcd:v3.6.16", PodSummary(p)
	}))
	t.Logf("in-place upgrade to Ready in %s", time.Since(upgraded).Round(time.Millisecond))
	if v, err := etcdVersion(ctx, endpoint); err != nil || v != "3.6.16" {
		t.Errorf("version after upgrade = %q, %v; want 3.6.16", v, err)
	}
	if v, err := etcdGet(ctx, endpoint, "kept"); err != nil || v != "across-upgrade" {
		t.Errorf("after upgrade: kept = %q, %v", v, err)
	}

	if err := env.DeleteParentAndWait(ns, cluster, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var finalizes int
	for _, c := range fake.Calls(ns + "/" + cluster) {
		if c.Finalizing && c.Path == "/finalize" {
			finalizes++
		}
	}
	if finalizes < 2 {
		t.Errorf("%d finalize calls, want at least 2 (children first, then finalized)", finalizes)
	}
	for _, typ := range []string{TypePod, TypeService, TypePVC, TypePDB, TypeNetPolicy, TypeSecret} {
		if left := env.API.List(typ, ns); len(left) != 0 {
			t.Errorf("%d %s left after the parent is gone", len(left), typ)
		}
	}
	if _, err := os.Stat(pvDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PVC directory %s still exists: %v", pvDir, err)
	}
}
