package gitopstest

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v2"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/manifests/gitops"
)

var kinds = []string{v1beta2.Kind, v1beta2.KindBackup, v1beta2.KindRestore}

// object is an etcd-hook object of kind at generation 2 with status.
func object(kind string, status map[string]any) map[string]any {
	obj := map[string]any{
		"apiVersion": v1beta2.APIVersion, "kind": kind,
		"metadata": map[string]any{"name": "demo", "namespace": "prod", "generation": 2},
	}
	if status != nil {
		obj["status"] = status
	}
	return obj
}

func conditions(observed int, typeStatus ...string) map[string]any {
	var cs []any
	for i := 0; i+1 < len(typeStatus); i += 2 {
		cs = append(cs, map[string]any{"type": typeStatus[i], "status": typeStatus[i+1], "reason": "Because", "message": "it is so"})
	}
	return map[string]any{"observedGeneration": observed, "conditions": cs}
}

// TestJudge holds the three tools to the statuses every kind can have,
// and to the two moments before the hook has said anything about the
// current generation.
func TestJudge(t *testing.T) {
	tests := []struct {
		name   string
		reason string
		status map[string]any
		want   Verdict
	}{
		{"no status yet", "kstatus counts an object without conditions as Current; the Flux expressions and the Argo CD check wait for the hook",
			nil, Verdict{KStatus: "Current", Flux: "Unknown", ArgoCD: "Progressing"}},
		{"an older generation observed", "the status is about an earlier spec: every tool waits",
			conditions(1, "Ready", "True", "Reconciling", "False", "Stalled", "False"), Verdict{KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"}},
		{"ready", "", conditions(2, "Ready", "True", "Reconciling", "False", "Stalled", "False"), Verdict{KStatus: "Current", Flux: "Current", ArgoCD: "Healthy"}},
		{"reconciling", "", conditions(2, "Ready", "False", "Reconciling", "True", "Stalled", "False"), Verdict{KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"}},
		{"stalled", "", conditions(2, "Ready", "False", "Reconciling", "False", "Stalled", "True"), Verdict{KStatus: "Failed", Flux: "Failed", ArgoCD: "Degraded"}},
		{"not ready, not moving", "waiting on something outside the hook (a Secret to come, a member to return)",
			conditions(2, "Ready", "False", "Reconciling", "False", "Stalled", "False"), Verdict{KStatus: "InProgress", Flux: "InProgress", ArgoCD: "Progressing"}},
	}
	for _, kind := range kinds {
		for _, tt := range tests {
			t.Run(kind+"/"+tt.name, func(t *testing.T) {
				got, err := Judge(object(kind, tt.status))
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(tt.want, got); d != "" {
					t.Errorf("%s (-want +got):\n%s", tt.reason, d)
				}
			})
		}
	}
}

// TestArgoCDPaused: a paused cluster is Suspended to Argo CD whatever its
// other conditions say, and the message is the Ready condition's.
func TestArgoCDPaused(t *testing.T) {
	st := conditions(2, "Ready", "True", "Reconciling", "False", "Stalled", "False")
	st["controlPaused"] = true
	got, err := ArgoCD(object(v1beta2.Kind, st))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(ArgoHealth{Status: "Suspended", Message: "Because: it is so"}, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestArgoCDConfigMapCarriesTheCheck: argocd-cm.yaml installs exactly
// argocd-health.lua for each kind, under the key Argo CD looks up
// (resource.customizations.health.<group>_<kind>).
func TestArgoCDConfigMapCarriesTheCheck(t *testing.T) {
	var cm struct {
		Kind     string            `yaml:"kind"`
		Metadata map[string]any    `yaml:"metadata"`
		Data     map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(gitops.ArgoCDConfigMap, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata["name"] != "argocd-cm" {
		t.Errorf("kind %q name %v, want the ConfigMap argocd-cm", cm.Kind, cm.Metadata["name"])
	}
	want := map[string]string{}
	for _, kind := range kinds {
		want["resource.customizations.health."+v1beta2.Group+"_"+kind] = gitops.ArgoCDHealthLua
	}
	if d := cmp.Diff(want, cm.Data); d != "" {
		t.Errorf("argocd-cm.yaml data, against argocd-health.lua (-want +got):\n%s", d)
	}
}

// TestFluxExprsForEveryKind: the Flux Kustomization has expressions for
// each kind, and each reads the condition kstatus would.
func TestFluxExprsForEveryKind(t *testing.T) {
	exprs, err := FluxExprs()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range kinds {
		e, ok := exprs[v1beta2.APIVersion+"/"+kind]
		if !ok {
			t.Errorf("no healthCheckExprs for %s", kind)
			continue
		}
		for cond, expr := range map[string]string{"Reconciling": e.InProgress, "Stalled": e.Failed, "Ready": e.Current} {
			if !strings.Contains(expr, "'"+cond+"'") {
				t.Errorf("%s: expression %q does not read %s", kind, expr, cond)
			}
		}
	}
}

// gitOpsPage is the documentation page on GitOps health.
const gitOpsPage = "docs/gitops.md"

// TestGitOpsPageShowsWhatShips: the GitOps health page quotes the Argo CD
// check and the Flux Kustomization as they are in manifests/gitops.
func TestGitOpsPageShowsWhatShips(t *testing.T) {
	page, err := os.ReadFile(testenv.Path(t, gitOpsPage))
	if err != nil {
		t.Fatal(err)
	}
	flux := string(gitops.FluxKustomization)
	flux = flux[strings.Index(flux, "apiVersion: kustomize"):]
	for name, text := range map[string]string{"argocd-health.lua": gitops.ArgoCDHealthLua, "flux-kustomization.yaml": flux} {
		if !strings.Contains(string(page), "\n"+text+"```\n") {
			t.Errorf("%s does not quote manifests/gitops/%s as it is", gitOpsPage, name)
		}
	}
}
