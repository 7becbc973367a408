package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// claimSpec is spec.pod.persistentVolumeClaimSpec on class, of size.
func claimSpec(class, size string) map[string]any {
	return map[string]any{
		"persistentVolumeClaimSpec": map[string]any{
			"storageClassName": class,
			"accessModes":      []any{"ReadWriteOnce"},
			"resources":        map[string]any{"requests": map[string]any{"storage": size}},
		},
	}
}

// claimSizes samples the member claims all along, to check that no two
// grow at once: a claim grows from its request being raised until its
// capacity reaches it.
type claimSizes struct {
	s    *scenario
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	most    int
	growing map[string]bool
}

func watchClaimSizes(s *scenario) *claimSizes {
	w := &claimSizes{s: s, stop: make(chan struct{}), done: make(chan struct{}), growing: map[string]bool{}}
	go func() {
		defer close(w.done)
		for {
			n := 0
			for _, obj := range s.env.API.List(harness.TypePVC, ns) {
				name, _ := obj["metadata"].(map[string]any)["name"].(string)
				c, ok := s.env.Claim(ns, name)
				if !ok {
					continue
				}
				req, capacity := c.Spec.Resources.Requests[corev1.ResourceStorage], c.Status.Capacity[corev1.ResourceStorage]
				if req.Cmp(capacity) > 0 {
					n++
					w.mu.Lock()
					w.growing[name] = true
					w.mu.Unlock()
				}
			}
			w.mu.Lock()
			w.most = max(w.most, n)
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *claimSizes) finish() (most int, grew []string) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	for name := range w.growing {
		grew = append(grew, name)
	}
	slices.Sort(grew)
	return w.most, grew
}

// capacities are the member claims' capacity, by name.
func (s *scenario) capacities() map[string]string {
	out := map[string]string{}
	for name := range s.claimUIDs() {
		if c, ok := s.env.Claim(ns, name); ok {
			q := c.Status.Capacity[corev1.ResourceStorage]
			out[name] = q.String()
		}
	}
	return out
}

func allEqual(m map[string]string, v string) bool {
	for _, x := range m {
		if x != v {
			return false
		}
	}
	return len(m) > 0
}

// TestGrowVolumes: a cluster of 3 on claims of a class that allows
// expansion, under a writer. Raising the storage request grows every
// member's claim in place, one at a time, with no Pod restarted and no
// membership change, and status.storage follows the claims. A smaller
// request is then refused in a condition, touching nothing: the claims
// stay, and Metacontroller never sees an answer the API server refuses.
func TestGrowVolumes(t *testing.T) {
	s := onClaimsOf(t, "volumes", "growable", harness.StorageClassOptions{AllowVolumeExpansion: true}, harness.Options{ClusterCustomize: true})
	if t.Failed() {
		return
	}
	before := s.world(s.c.PodNames())
	claims := s.claimUIDs()
	logged := len(s.loggedActions())

	sizes := watchClaimSizes(s)
	start := time.Now()
	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"pod": claimSpec("growable", "2Gi")}); err != nil {
		t.Fatal(err)
	}
	st := s.waitParent(2*time.Minute, "every claim at 2Gi, status.storage saying so, converged", func(st ParentStatus) bool {
		prog, _ := st.Condition("Progressing")
		return st.Storage != nil && st.Storage.Capacity == "2Gi" && st.Storage.Requested == "2Gi" && prog == "False" && allEqual(s.capacities(), "2Gi")
	})
	most, grew := sizes.finish()
	if t.Failed() {
		return
	}
	t.Logf("volumes: grown to 2Gi in %s; at most %d claim growing at once; %s", time.Since(start).Round(100*time.Millisecond), most, st.Reason)
	if most > 1 {
		t.Errorf("volumes: %d claims grew at once, want one at a time", most)
	}
	if d := cmp.Diff(sorted(mapKeys(claims)), grew); d != "" {
		t.Errorf("volumes: the claims seen growing (-every claim +seen):\n%s", d)
	}
	after := s.world(s.c.PodNames())
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("volumes: members (name → ID) or Pods (name → UID) changed: a growth restarts nothing (-before +after):\n%s", d)
	}
	for _, p := range s.c.Pods() {
		if p.Restarts != 0 {
			t.Errorf("volumes: member %s restarted %d times", p.Name, p.Restarts)
		}
	}
	if d := cmp.Diff(claims, s.claimUIDs()); d != "" {
		t.Errorf("volumes: the claims (name → UID) changed (-want +got):\n%s", d)
	}
	for _, a := range s.loggedActions()[logged:] {
		t.Errorf("volumes: a growth changed the membership: %+v", a)
	}
	for _, c := range st.Storage.Claims {
		if c.Requested != "2Gi" || c.Capacity != "2Gi" || c.Resizing != "" {
			t.Errorf("volumes: status.storage claim %+v, want 2Gi requested and held", c)
		}
	}

	// A smaller request: refused, nothing touched.
	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"pod": claimSpec("growable", "1Gi")}); err != nil {
		t.Fatal(err)
	}
	st = s.waitParent(time.Minute, "the smaller request refused", func(st ParentStatus) bool {
		_, reason := st.Condition("Degraded")
		return reason == "VolumeChangeRefused"
	})
	if t.Failed() {
		return
	}
	msg := ""
	for _, c := range st.Conditions {
		if c.Type == "Degraded" {
			msg = c.Message
		}
	}
	if !strings.Contains(msg, "cannot shrink") {
		t.Errorf("volumes: Degraded says %q, want it to say a claim cannot shrink", msg)
	}
	if stalled, reason := st.Condition("Stalled"); stalled != "True" || reason != "VolumeChangeRefused" {
		t.Errorf("volumes: Stalled %s (%s), want True: a person must set the request back", stalled, reason)
	}
	time.Sleep(2 * time.Second)
	if got := s.capacities(); !allEqual(got, "2Gi") {
		t.Errorf("volumes: after the refused shrink, capacities %v", got)
	}
	for _, name := range mapKeys(claims) {
		if c, _ := s.env.Claim(ns, name); c != nil {
			if q := c.Spec.Resources.Requests[corev1.ResourceStorage]; q.Cmp(resource.MustParse("2Gi")) != 0 {
				t.Errorf("volumes: claim %s requests %s after the refused shrink", name, q.String())
			}
		}
	}
	if errs := s.env.MC.TakeApplyErrors(); len(errs) > 0 {
		t.Errorf("volumes: Metacontroller failed to apply answers: %v", errs)
	}
	s.verifyWrites("volumes grown")
}

// TestGrowVolumesOnMount: a class whose driver grows file systems only
// when the volume is next mounted leaves each claim FileSystemResizePending.
// Past --filesystem-resize-grace the member's Pod is rolled, one member at
// a time, each back on its own claim with the same ID, and no write lost.
func TestGrowVolumesOnMount(t *testing.T) {
	longTail(t, "growing claims is TestGrowVolumes; restarting members one at a time, TestRolloutSpecChange")
	s := onClaimsOf(t, "volumes-on-mount", "offline", harness.StorageClassOptions{AllowVolumeExpansion: true, OfflineExpansion: true},
		harness.Options{ClusterCustomize: true, HookArgs: []string{"--filesystem-resize-grace=3s"}})
	if t.Failed() {
		return
	}
	before := s.world(s.c.PodNames())
	claims := s.claimUIDs()

	start := time.Now()
	if _, err := s.env.MC.MergePatchParentSpec(ns, exampleName, map[string]any{"pod": claimSpec("offline", "2Gi")}); err != nil {
		t.Fatal(err)
	}
	var seenOut int
	st := s.waitParent(4*time.Minute, "every claim at 2Gi after its member's Pod mounted it again, converged", func(st ParentStatus) bool {
		out := 0
		for _, p := range s.c.Pods() {
			if !p.Ready || p.Terminating {
				out++
			}
		}
		seenOut = max(seenOut, out)
		prog, _ := st.Condition("Progressing")
		return st.ReadyMembers == 3 && prog == "False" && allEqual(s.capacities(), "2Gi")
	})
	if t.Failed() {
		return
	}
	t.Logf("volumes on mount: grown in %s, at most %d member out at once; %s", time.Since(start).Round(100*time.Millisecond), seenOut, st.Reason)
	if seenOut > 1 {
		t.Errorf("volumes on mount: %d members out at once, want one at a time", seenOut)
	}
	after := s.world(s.c.PodNames())
	if d := cmp.Diff(before.Members, after.Members); d != "" {
		t.Errorf("volumes on mount: members (name → ID) changed: each keeps its claim (-before +after):\n%s", d)
	}
	for name, uid := range before.Pods {
		if after.Pods[name] == uid {
			t.Errorf("volumes on mount: member %s kept its Pod; only a new Pod mounts the grown volume", name)
		}
	}
	if d := cmp.Diff(claims, s.claimUIDs()); d != "" {
		t.Errorf("volumes on mount: the claims (name → UID) changed (-want +got):\n%s", d)
	}
	for name := range after.Pods {
		s.checkRestartedFromData("volumes on mount", name)
	}
	s.verifyWrites(fmt.Sprintf("volumes grown on mount (%d members)", len(after.Pods)))
}

// onClaimsOf is a cluster of 3 on claims of 1Gi of a class made for it,
// under a writer.
func onClaimsOf(t *testing.T, step, class string, sc harness.StorageClassOptions, opts harness.Options) *scenario {
	t.Helper()
	s := newFaultScenario(t, opts)
	if err := s.env.CreateStorageClass(class, sc); err != nil {
		t.Fatal(err)
	}
	s.createSpec(step+": create, size 3, on claims of 1Gi", map[string]any{"size": 3, "version": faultVersion, "pod": claimSpec(class, "1Gi")})
	if !t.Failed() {
		s.startFaultWriter(step)
		s.waitWrites(writesAround)
	}
	return s
}

func mapKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
