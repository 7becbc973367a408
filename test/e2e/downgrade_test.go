package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Scenario U5: a rolling downgrade of three members one minor version
// down, 3.7 → 3.6, through etcd's own protocol, under the writer: the hook
// validates and enables etcd's downgrade, waits for every member's storage
// version to come down, replaces the binaries one at a time, leader last,
// and waits for etcd to end the downgrade. Before it: two minors down is
// refused and changes nothing, and a downgrade set back halfway is
// cancelled in etcd.
func TestDowngradeRolling(t *testing.T) {
	s := upgradeScenario(t, newVersion, oldVersion)
	s.create("setup", newVersion, 3)
	ids := s.members()

	checkRefused(t, s, newVersion, skippedFromVersion, "by more than one minor version",
		fmt.Sprintf("refuse %s→%s (two minor versions down)", newVersion, skippedFromVersion))
	if t.Failed() {
		return
	}
	s.cancelledDowngrade()
	if t.Failed() {
		return
	}

	step := fmt.Sprintf("downgrade %s→%s, 3 members", newVersion, oldVersion)
	s.startWriter("downgrade")
	s.waitWrites(writesAround)
	leader := s.leader()
	stops := map[string]int{}
	for _, p := range s.c.PodNames() {
		stops[p] = followerStops(t, s, p)
	}
	actionsBefore, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	watch := WatchRollout(s.env.Ctx(), s.c)
	start, syncs := time.Now(), s.syncs()
	s.patchVersion(oldVersion)
	Report(t, s.upgrade(step, oldVersion, start, syncs, 3))
	changes, leaders, conditions := watch.Stop()
	logRollout(t, changes, leaders, conditions)

	if d := cmp.Diff(ids, s.members()); d != "" {
		t.Errorf("member names and IDs changed across the downgrade (-before +after):\n%s", d)
	}
	actionsAfter, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	delta := actionDelta(actionsBefore, actionsAfter)
	if delta["downgrade-enable/ok"] != 1 || delta["move-leader/ok"] != 1 {
		t.Errorf("hook actions during the downgrade %v: want etcd's downgrade enabled once and leadership moved once", delta)
	}
	for action := range delta {
		if !strings.HasPrefix(action, "downgrade-enable/") && !strings.HasPrefix(action, "move-leader/") {
			t.Errorf("hook action %s during the downgrade: want only the enable and the leader's move", action)
		}
	}
	checkRolloutOrder(t, changes, leader, 3)
	checkStoppedAsFollowers(t, s, changes, "", stops)
	checkConditionsNamed(t, conditions, changes, "downgrading")
	// A member given 3.6 before etcd lowered the cluster version panics
	// at start ("invalid downgrade; server version is lower than
	// determined cluster version"), and the kubelet restarts it.
	for _, p := range s.c.PodNames() {
		data, err := os.ReadFile(s.env.Kubelet.ContainerLog(ns, p, "etcd"))
		if err != nil {
			t.Fatal(err)
		}
		if log := string(data); strings.Contains(log, "invalid downgrade") || strings.Contains(log, `"level":"panic"`) || strings.Contains(log, `"level":"fatal"`) {
			t.Errorf("etcd of %s refused its release during the downgrade: %s", p, tail(log, 2000))
		}
	}
	// Each binary changed only once etcd had lowered the storage, which
	// the hook waited for by name.
	if !conditionsSaid(conditions, "waiting for etcd to lower the storage version") && !conditionsSaid(conditions, "validating and enabling etcd's downgrade") {
		t.Errorf("no Upgrading condition reported etcd's downgrade being enabled or the storage being lowered: %v", conditions)
	}
	s.checkEtcdVersions(lineOf(oldVersion))
}

// cancelledDowngrade asks for the downgrade, sets the version back once
// the first member runs the lower release, and checks that the hook
// cancelled etcd's downgrade: every member back on the newer release, the
// cluster version with them, nothing enabled, no membership change.
func (s *scenario) cancelledDowngrade() {
	t := s.t
	step := fmt.Sprintf("downgrade %s→%s set back halfway", newVersion, oldVersion)
	s.startWriter("downgrade-cancelled")
	s.waitWrites(writesAround)
	before := s.members()
	actionsBefore, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	start, syncs := time.Now(), s.syncs()
	s.patchVersion(oldVersion)
	if err := s.env.WaitFor(convergeTimeout, "a member downgraded", func() (bool, string) {
		for name, img := range s.c.PodImages() {
			if img.Running == etcdImage(oldVersion) && img.Ready {
				return true, name
			}
		}
		return false, fmt.Sprint(s.c.PodImages())
	}); err != nil {
		t.Fatal(err)
	}
	s.patchVersion(newVersion)
	Report(t, s.upgrade(step, newVersion, start, syncs, 3))
	if d := cmp.Diff(before, s.members()); d != "" {
		t.Errorf("%s: member names and IDs changed (-before +after):\n%s", step, d)
	}
	actionsAfter, err := HookActions(s.env.Hook.URL())
	if err != nil {
		t.Fatal(err)
	}
	delta := actionDelta(actionsBefore, actionsAfter)
	if delta["downgrade-enable/ok"] != 1 || delta["downgrade-cancel/ok"] < 1 {
		t.Errorf("%s: hook actions %v, want etcd's downgrade enabled once and cancelled", step, delta)
	}
	if d := cmp.Diff(map[string]float64{}, membershipChanges(delta)); d != "" {
		t.Errorf("%s: membership changed (-want +got):\n%s", step, d)
	}
	s.checkEtcdVersions(lineOf(newVersion))
}

// checkEtcdVersions asks every member's etcd for the cluster version (its
// /version endpoint), its storage version and whether a downgrade is
// enabled: once a change of version is done, the cluster version and every
// storage version are line's, and no downgrade is left enabled. etcd moves
// the storage version a few seconds after the cluster version.
func (s *scenario) checkEtcdVersions(line string) {
	t := s.t
	want := etcdVersions{Cluster: line + ".0", Storage: line + ".0"}
	err := s.env.WaitFor(30*time.Second, "cluster and storage version "+line, func() (bool, string) {
		for _, name := range s.c.PodNames() {
			got, err := s.c.etcdVersions(s.env.Ctx(), name)
			if err != nil {
				return false, err.Error()
			}
			if d := cmp.Diff(want, got); d != "" {
				return false, fmt.Sprintf("%s (-want +got):\n%s", name, d)
			}
		}
		return true, ""
	})
	if err != nil {
		t.Error(err)
	}
}

// etcdVersions is what a member says of the versions that gate a
// downgrade.
type etcdVersions struct {
	Cluster   string // /version's etcdcluster
	Storage   string // Status's storageVersion
	Downgrade string // Status's downgradeInfo target, when enabled
}

func (c *Cluster) etcdVersions(ctx context.Context, member string) (etcdVersions, error) {
	var out etcdVersions
	url := c.MemberURL(member)
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: nil, TLSClientConfig: clientTLSForURL(url), DisableKeepAlives: true}}
	resp, err := client.Get(url + "/version")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	var v struct {
		Cluster string `json:"etcdcluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return out, fmt.Errorf("%s/version: %w", url, err)
	}
	out.Cluster = v.Cluster
	cli, err := NewClient(url)
	if err != nil {
		return out, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, url)
	if err != nil {
		return out, fmt.Errorf("status of %s: %w", url, err)
	}
	out.Storage = st.StorageVersion
	if d := st.DowngradeInfo; d != nil && d.Enabled {
		out.Downgrade = d.TargetVersion
	}
	return out, nil
}

func conditionsSaid(conditions []UpgradeCondition, words string) bool {
	for _, c := range conditions {
		if strings.Contains(c.Message, words) {
			return true
		}
	}
	return false
}
