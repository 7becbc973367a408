// Package gitops_test judges, on every unit run, the EtcdCluster statuses
// the e2e scenarios recorded from a running hook (see test/e2e/gitops_test.go):
// what kstatus, Flux's healthCheckExprs and Argo CD's Lua check in
// manifests/gitops make of each, against what the scenario expected.
// Record them again with
//
//	ETCDHOOK_E2E_RECORD_STATUSES=1 go test ./test/e2e -run 'TestScale|TestUpgradeRolling|TestUpgradeUnavailable|TestFaultFrozenMembers|TestFaultBadInput' -count=1
package gitops_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/gitopstest"
)

// recorded mirrors test/e2e's RecordedStatus.
type recorded struct {
	Point  string             `json:"point"`
	Want   gitopstest.Verdict `json:"want"`
	Object map[string]any     `json:"object"`
}

// points are the states the issue names, each recorded by a scenario.
var points = map[string]gitopstest.Verdict{
	"converged":            {KStatus: "Current", Flux: "Current", ArgoCD: "Healthy"},
	"scaling":              {KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"},
	"upgrading":            {KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"},
	"rolling":              {KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"},
	"invalid-spec":         {KStatus: "Failed", Flux: "Failed", ArgoCD: "Degraded"},
	"version-skew-refused": {KStatus: "Failed", Flux: "Failed", ArgoCD: "Degraded"},
	"upgrade-halted":       {KStatus: "Failed", Flux: "Failed", ArgoCD: "Degraded"},
	"quorum-lost":          {KStatus: "Failed", Flux: "Failed", ArgoCD: "Degraded"},
}

func TestRecordedStatuses(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "statuses", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var r recorded
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		point := strings.TrimSuffix(filepath.Base(f), ".json")
		seen[point] = true
		t.Run(point, func(t *testing.T) {
			if want, ok := points[point]; ok && want != r.Want {
				t.Errorf("recorded as %+v, the issue asks for %+v", r.Want, want)
			}
			got, err := gitopstest.Judge(r.Object)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(r.Want, got); d != "" {
				t.Errorf("(-recorded +judged now):\n%s", d)
			}
		})
	}
	for point := range points {
		if !seen[point] {
			t.Errorf("no recording of %q under testdata/statuses: run the e2e scenarios with ETCDHOOK_E2E_RECORD_STATUSES=1", point)
		}
	}
}
