package harness

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// etcdctlHealth runs `etcdctl endpoint health` against endpoint with the
// given group, as a process of a Pod with that group would connect.
func etcdctlHealth(t *testing.T, env *Env, gid uint32, endpoint string) error {
	t.Helper()
	p, err := env.Procs.Start(testenv.ProcessSpec{
		Name: "etcdctl", Path: testenv.Binary(t, testenv.Etcdctl("3.6.16")),
		Args:    []string{"--endpoints=" + endpoint, "--dial-timeout=1s", "--command-timeout=2s", "endpoint", "health"},
		Env:     []string{"ETCDCTL_API=3"},
		LogPath: filepath.Join(env.Dir, "logs", "etcdctl.log"),
		Gid:     gid,
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		_ = p.Kill()
	}
	if code := p.ExitCode(); code != 0 {
		return fmt.Errorf("etcdctl endpoint health %s (group %d): exit code %d", endpoint, gid, code)
	}
	return nil
}

func health(ctx context.Context, ip string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ip+":2379/health", nil)
	if err != nil {
		return err
	}
	resp, err := plainHTTP.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

func procGroup(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "Gid:"); ok {
			return strings.Fields(rest)[0], nil
		}
	}
	return "", fmt.Errorf("no Gid line in /proc/%d/status", pid)
}

// TestPartition proves the partition both ways and its scope: the Pod
// cannot be reached, what runs with its group reaches nothing, and the
// rest of loopback is untouched; Heal and the end of the kubelet undo it.
func TestPartition(t *testing.T) {
	requireEtcd(t, "3.6.16")
	RequirePartition(t)
	env, _ := newEnvWithFake(t, Options{Kubelet: KubeletConfig{PodGroups: true}})
	ctx := env.Ctx()
	for _, c := range []string{"cut", "other"} {
		if _, err := env.MC.CreateParent(ns, c, map[string]any{"size": 1, "version": "3.6.16"}); err != nil {
			t.Fatal(err)
		}
	}
	cutPod, err := env.WaitPodReady(ns, "cut-0", 30*time.Second)
	mustWait(t, err)
	otherPod, err := env.WaitPodReady(ns, "other-0", 30*time.Second)
	mustWait(t, err)
	cutIP, otherIP := nestedString(cutPod, "status", "podIP"), nestedString(otherPod, "status", "podIP")
	group := PodGroup(netip.MustParseAddr(cutIP))

	pid, err := env.Kubelet.ContainerPID(ns, "cut-0", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := procGroup(pid); err != nil || got != fmt.Sprint(group) {
		t.Errorf("group of the Pod's etcd (pid %d) = %q (%v), want %d", pid, got, err, group)
	}

	if err := env.Kubelet.Partition(ns, "cut-0"); err != nil {
		t.Fatal(err)
	}
	table := env.Kubelet.FirewallTable()
	if err := health(ctx, cutIP); err == nil {
		t.Error("the partitioned Pod answered /health")
	}
	if err := etcdctlHealth(t, env, group, "http://"+otherIP+":2379"); err == nil {
		t.Error("a process with the partitioned Pod's group reached another Pod")
	}
	if err := etcdctlHealth(t, env, 0, "http://"+otherIP+":2379"); err != nil {
		t.Errorf("the partition cut traffic between two other parties: %v", err)
	}
	mustWait(t, env.WaitFor(15*time.Second, "the partitioned Pod unready and Running", func() (bool, string) {
		p, _ := env.Pod(ns, "cut-0")
		return !podReady(p) && nestedString(p, "status", "phase") == "Running", PodSummary(p)
	}))

	if err := env.Kubelet.Heal(ns, "cut-0"); err != nil {
		t.Fatal(err)
	}
	_, err = env.WaitPodReady(ns, "cut-0", 15*time.Second)
	mustWait(t, err)
	if err := etcdctlHealth(t, env, group, "http://"+otherIP+":2379"); err != nil {
		t.Errorf("after Heal: %v", err)
	}
	if err := env.Kubelet.Heal(ns, "cut-0"); err == nil {
		t.Error("a second Heal succeeded")
	}

	// The kubelet's end removes a partition still in place, with its table.
	if err := env.Kubelet.Partition(ns, "cut-0"); err != nil {
		t.Fatal(err)
	}
	env.Kubelet.closeFirewall()
	if out, err := exec.Command("nft", "list", "table", "inet", table).CombinedOutput(); err == nil {
		t.Errorf("table %s is still there:\n%s", table, out)
	}
	if err := health(ctx, cutIP); err != nil {
		t.Errorf("the Pod is unreachable after the firewall closed: %v", err)
	}
}
