package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/internal/gitopstest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// GitOps health and per-cluster metrics, as the scenarios see them.
//
// At the points the GitOps tools care about (converged, scaling,
// upgrading, an invalid spec, a refused version, a halted upgrade, a lost
// quorum) a scenario judges the live EtcdCluster with kstatus, Flux's
// healthCheckExprs and Argo CD's Lua check (internal/gitopstest), and
// fails if they do not say what a person would expect. With
// ETCDHOOK_E2E_RECORD_STATUSES=1 it also saves the object it judged under
// test/gitops/testdata/statuses, where a unit test judges the same real
// statuses on every `make unit`, without a cluster.

// recordStatusesEnv asks the scenarios to save the objects they judge.
const recordStatusesEnv = "ETCDHOOK_E2E_RECORD_STATUSES"

// statusesDir is where the recordings go, from the module root.
const statusesDir = "test/gitops/testdata/statuses"

// What the tools say of a cluster in each kind of state.
var (
	healthHealthy     = gitopstest.Verdict{KStatus: "Current", Flux: "Current", ArgoCD: "Healthy"}
	healthProgressing = gitopstest.Verdict{KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"}
	healthDegraded    = gitopstest.Verdict{KStatus: "Failed", Flux: "Failed", ArgoCD: "Degraded"}
)

// A lost quorum is reported Stalled once it has lasted quorumLossConfirm,
// at the hook's next resync in trouble (5 s): quorumLossStalledWithin
// bounds the wait.
const (
	quorumLossConfirm       = etcdcluster.QuorumLossConfirmAfter
	quorumLossStalledWithin = quorumLossConfirm + 30*time.Second
)

// RecordedStatus is one recording: the object as the API served it, and
// what the tools said of it then.
type RecordedStatus struct {
	Point  string             `json:"point"`
	Want   gitopstest.Verdict `json:"want"`
	Object harness.Object     `json:"object"`
}

// checkHealth waits until the live EtcdCluster's status is about its
// current generation and satisfies ok, and until the tools say want of
// it; with ETCDHOOK_E2E_RECORD_STATUSES set, the object is saved as
// point.
func (s *scenario) checkHealth(point string, timeout time.Duration, want gitopstest.Verdict, ok func(ParentStatus) bool) {
	s.t.Helper()
	var obj harness.Object
	err := s.env.WaitFor(timeout, fmt.Sprintf("%s: the GitOps tools to say %+v", point, want), func() (bool, string) {
		o, found := s.env.MC.Parent(s.c.Namespace, s.c.Name)
		gen, st, _ := s.c.Parent()
		if !found || st.ObservedGeneration != gen || !ok(st) {
			return false, describeStatus(st)
		}
		got, err := gitopstest.Judge(o)
		if err != nil {
			return false, err.Error()
		}
		obj = o
		return got == want, fmt.Sprintf("%+v: %s", got, describeStatus(st))
	})
	if err != nil {
		s.t.Error(err)
		return
	}
	if os.Getenv(recordStatusesEnv) == "" {
		return
	}
	if err := saveStatus(RecordedStatus{Point: point, Want: want, Object: obj}); err != nil {
		s.t.Error(err)
	}
}

func saveStatus(r RecordedStatus) error {
	dir, err := testenv.FromModuleRoot(statusesDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, r.Point+".json"), append(data, '\n'), 0o644)
}

// conditionIs: the condition has the status and, if given, the reason.
func conditionIs(typ, status, reason string) func(ParentStatus) bool {
	return func(st ParentStatus) bool {
		s, r := st.Condition(typ)
		return s == status && (reason == "" || r == reason)
	}
}

// clusterSeries scrapes the hook's /metrics for the per-cluster series of
// namespace/name, by metric name.
func clusterSeries(hookURL, namespace, name string) (map[string]float64, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Get(hookURL + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: HTTP %d", resp.StatusCode)
	}
	return parseClusterSeries(resp.Body, namespace, name)
}

// parseClusterSeries reads the text exposition format: lines such as
// etcd_cluster_ready_members{name="demo",namespace="prod"} 5.
func parseClusterSeries(r io.Reader, namespace, name string) (map[string]float64, error) {
	out := map[string]float64{}
	labels := fmt.Sprintf(`{name=%q,namespace=%q}`, name, namespace)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		metric, rest, ok := strings.Cut(line, labels+" ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: cannot parse %q: %w", line, err)
		}
		out[metric] = v
	}
	return out, sc.Err()
}

// checkSeries waits for the hook's /metrics to carry want for the
// scenario's cluster: the gauges are set as each answer leaves, so the
// converged status and its series arrive together, and the wait only
// absorbs a scrape racing the last answer.
func (s *scenario) checkSeries(step string, want map[string]float64) {
	s.t.Helper()
	err := s.env.WaitFor(10*time.Second, step+": the per-cluster series", func() (bool, string) {
		got, err := clusterSeries(s.env.Hook.URL(), s.c.Namespace, s.c.Name)
		if err != nil {
			return false, err.Error()
		}
		for name, v := range want {
			if g, ok := got[name]; !ok || g != v {
				return false, fmt.Sprintf("%s = %v (present %v), want %v", name, g, ok, v)
			}
		}
		return true, ""
	})
	if err != nil {
		s.t.Error(err)
	}
}
