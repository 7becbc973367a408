package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// etcdImage is a member image of the default repository, as the hook
// renders it from spec.version.
func etcdImage(version string) string { return "quay.io/coreos/etcd:v" + version }

// PodImage is the etcd container of a member Pod: the image its spec asks
// for and, from the kubelet's status, the image it runs and why it waits.
type PodImage struct {
	Spec    string
	Running string // the container status' image; the spec's while nothing runs
	Ready   bool
	Waiting string // the container's waiting reason, "" when it runs
}

// PodImages maps the cluster's member Pods to their etcd container.
func (c *Cluster) PodImages() map[string]PodImage {
	out := map[string]PodImage{}
	for _, obj := range c.Env.API.List(harness.TypePod, c.Namespace) {
		var p corev1.Pod
		data, err := json.Marshal(obj)
		if err != nil || json.Unmarshal(data, &p) != nil || p.Labels["etcd_cluster"] != c.Name {
			continue
		}
		img := PodImage{Ready: harness.IsPodReady(obj)}
		for _, ctr := range p.Spec.Containers {
			if ctr.Name == "etcd" {
				img.Spec = ctr.Image
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != "etcd" {
				continue
			}
			img.Running = cs.Image
			if cs.State.Waiting != nil {
				img.Waiting = cs.State.Waiting.Reason
			}
		}
		out[p.Name] = img
	}
	return out
}

// SpecImages maps Pod names to the image their spec asks for.
func (c *Cluster) SpecImages() map[string]string {
	out := map[string]string{}
	for name, img := range c.PodImages() {
		out[name] = img.Spec
	}
	return out
}

// UpgradeCondition is one condition of the parent with its message, which
// ParentStatus leaves out.
type UpgradeCondition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (c UpgradeCondition) String() string {
	return fmt.Sprintf("%s/%s %q", c.Status, c.Reason, c.Message)
}

// VersionStatus is the part of the parent's status a version change is
// judged by.
type VersionStatus struct {
	ObservedGeneration int64
	Generation         int64
	CurrentVersion     string
	TargetVersion      string
	Conditions         map[string]UpgradeCondition // by type
}

// VersionStatus reads the parent's versions and conditions.
func (c *Cluster) VersionStatus() (VersionStatus, bool) {
	obj, ok := c.Env.MC.Parent(c.Namespace, c.Name)
	if !ok {
		return VersionStatus{}, false
	}
	var p struct {
		Metadata struct {
			Generation int64 `json:"generation"`
		} `json:"metadata"`
		Status struct {
			ObservedGeneration int64  `json:"observedGeneration"`
			CurrentVersion     string `json:"currentVersion"`
			TargetVersion      string `json:"targetVersion"`
			Conditions         []struct {
				Type string `json:"type"`
				UpgradeCondition
			} `json:"conditions"`
		} `json:"status"`
	}
	data, err := json.Marshal(obj)
	if err != nil || json.Unmarshal(data, &p) != nil {
		return VersionStatus{}, false
	}
	st := VersionStatus{
		ObservedGeneration: p.Status.ObservedGeneration, Generation: p.Metadata.Generation,
		CurrentVersion: p.Status.CurrentVersion, TargetVersion: p.Status.TargetVersion,
		Conditions: map[string]UpgradeCondition{},
	}
	for _, cond := range p.Status.Conditions {
		st.Conditions[cond.Type] = cond.UpgradeCondition
	}
	return st, true
}

// MemberVersions asks every member Pod's etcd for the version it runs.
func (c *Cluster) MemberVersions(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, name := range c.PodNames() {
		v, err := etcdServerVersion(ctx, c.MemberURL(name))
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

// Upgraded checks the world against a finished change to version: the
// cluster converged at size members, every Pod asks for and runs the
// version's image, every member's etcd reports it, and the status says so
// with Upgrading False/UpToDate for the current generation.
func (c *Cluster) Upgraded(ctx context.Context, version string, size int) (bool, string) {
	if ok, why := c.Converged(ctx, size); !ok {
		return false, why
	}
	want := etcdImage(version)
	for name, img := range c.PodImages() {
		if img.Spec != want || img.Running != want {
			return false, fmt.Sprintf("pod %s: spec image %s, running %s (waiting %q), want %s", name, img.Spec, img.Running, img.Waiting, want)
		}
	}
	st, ok := c.VersionStatus()
	if !ok {
		return false, "parent is gone"
	}
	up := st.Conditions["Upgrading"]
	if st.ObservedGeneration != st.Generation || st.CurrentVersion != version || st.TargetVersion != version ||
		up.Status != "False" || up.Reason != "UpToDate" {
		return false, fmt.Sprintf("status: generation %d/%d, currentVersion %q, targetVersion %q, Upgrading %s",
			st.ObservedGeneration, st.Generation, st.CurrentVersion, st.TargetVersion, up)
	}
	versions, err := c.MemberVersions(ctx)
	if err != nil {
		return false, err.Error()
	}
	for name, v := range versions {
		if v != version {
			return false, fmt.Sprintf("etcd of %s reports %s, want %s", name, v, version)
		}
	}
	return true, fmt.Sprintf("every member runs %s", version)
}

// actionDelta is how the hook's membership action counters moved.
func actionDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// ImageChange is one Pod's image change as seen by RolloutWatch, with the
// leader etcd named just before and every Pod as it was when the change
// was seen.
type ImageChange struct {
	At       time.Time
	Pod      string
	From, To string
	Leader   string
	Pods     map[string]PodImage
}

func (c ImageChange) String() string {
	return fmt.Sprintf("%s %s %s→%s (leader %s)", c.At.Format("15:04:05.000"), c.Pod,
		strings.TrimPrefix(c.From, "quay.io/coreos/etcd:"), strings.TrimPrefix(c.To, "quay.io/coreos/etcd:"), c.Leader)
}

// RolloutWatch samples, every 100 ms, the Pods' spec images, the leader
// and the Upgrading condition, so that a scenario can check the order of a
// rollout after the fact. Sampling the leader needs no election and costs
// one Status call per member on a kept connection.
type RolloutWatch struct {
	c      *Cluster
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	changes    []ImageChange
	leaders    []string           // distinct leaders in the order seen
	conditions []UpgradeCondition // distinct Upgrading conditions in the order seen
}

// WatchRollout starts sampling; Stop ends it.
func WatchRollout(ctx context.Context, c *Cluster) *RolloutWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &RolloutWatch{c: c, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx)
	return w
}

func (w *RolloutWatch) run(ctx context.Context) {
	defer close(w.done)
	clients := map[string]*memberStatusClient{}
	defer func() {
		for _, mc := range clients {
			mc.close()
		}
	}()
	names := map[uint64]string{}
	images := w.c.PodImages()
	leader := ""
	for ctx.Err() == nil {
		if l := sampleLeader(ctx, w.c, clients, names); l != "" {
			leader = l
		}
		now := w.c.PodImages()
		w.mu.Lock()
		if n := len(w.leaders); leader != "" && (n == 0 || w.leaders[n-1] != leader) {
			w.leaders = append(w.leaders, leader)
		}
		for _, name := range slices.Sorted(maps.Keys(now)) {
			if was, ok := images[name]; ok && was.Spec != now[name].Spec {
				w.changes = append(w.changes, ImageChange{At: time.Now(), Pod: name, From: was.Spec, To: now[name].Spec, Leader: leader, Pods: now})
			}
		}
		if st, ok := w.c.VersionStatus(); ok {
			cond := st.Conditions["Upgrading"]
			if n := len(w.conditions); n == 0 || w.conditions[n-1] != cond {
				w.conditions = append(w.conditions, cond)
			}
		}
		w.mu.Unlock()
		images = now
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends the sampling and returns what was seen.
func (w *RolloutWatch) Stop() (changes []ImageChange, leaders []string, conditions []UpgradeCondition) {
	w.cancel()
	<-w.done
	return w.Snapshot()
}

// Snapshot returns what was seen so far.
func (w *RolloutWatch) Snapshot() (changes []ImageChange, leaders []string, conditions []UpgradeCondition) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.changes), slices.Clone(w.leaders), slices.Clone(w.conditions)
}

// memberStatusClient asks one member for its status over a kept connection:
// clientv3's Status dials a new one per call.
type memberStatusClient struct {
	cli *clientv3.Client
	m   clientv3.Maintenance
}

func (m *memberStatusClient) close() { _ = m.cli.Close() }

// sampleLeader asks every member Pod, in parallel and briefly, whom it
// follows; names maps member IDs to Pod names as members answer. It
// returns "" when no member named a leader it knows.
func sampleLeader(ctx context.Context, c *Cluster, clients map[string]*memberStatusClient, names map[uint64]string) string {
	type answer struct {
		pod  string
		resp *clientv3.StatusResponse
	}
	pods := c.PodNames()
	answers := make(chan answer, len(pods))
	for _, pod := range pods {
		mc, ok := clients[pod]
		if !ok {
			cli, err := NewClient(c.MemberURL(pod))
			if err != nil {
				answers <- answer{pod: pod}
				continue
			}
			mc = &memberStatusClient{cli: cli, m: clientv3.NewMaintenanceFromMaintenanceClient(etcdserverpb.NewMaintenanceClient(cli.ActiveConnection()), cli)}
			clients[pod] = mc
		}
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			resp, err := mc.m.Status(sctx, "")
			if err != nil {
				resp = nil
			}
			answers <- answer{pod: pod, resp: resp}
		}()
	}
	var leader uint64
	for range pods {
		a := <-answers
		if a.resp == nil || a.resp.Header == nil {
			continue
		}
		names[a.resp.Header.MemberId] = a.pod
		// The leader's own word wins over a follower's, which may lag an
		// election by a heartbeat.
		if leader == 0 || a.resp.Leader == a.resp.Header.MemberId {
			leader = a.resp.Leader
		}
	}
	return names[leader]
}

// etcdServerVersion is the server version of the etcd at endpoint, from
// its own Status.
func etcdServerVersion(ctx context.Context, endpoint string) (string, error) {
	cli, err := NewClient(endpoint)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return "", fmt.Errorf("status of %s: %w", endpoint, err)
	}
	return st.Version, nil
}
