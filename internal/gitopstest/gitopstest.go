package gitopstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	lua "github.com/yuin/gopher-lua"
	yaml "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/etcdhook/etcd-hook/manifests/gitops"
)

// Verdict is what each tool makes of an object.
type Verdict struct {
	// KStatus is kstatus's status: Current, InProgress, Failed, ...
	KStatus string `json:"kstatus"`
	// Flux is the status Flux's healthCheckExprs give.
	Flux string `json:"flux"`
	// ArgoCD is the Argo CD health: Healthy, Progressing, Degraded,
	// Suspended, ...
	ArgoCD string `json:"argocd"`
}

// Judge asks every tool about obj, which is anything that marshals to a
// Kubernetes object (a typed object, or a map as an API server serves it).
func Judge(obj any) (Verdict, error) {
	u, err := toUnstructured(obj)
	if err != nil {
		return Verdict{}, err
	}
	k, err := status.Compute(u)
	if err != nil {
		return Verdict{}, fmt.Errorf("kstatus: %w", err)
	}
	f, err := fluxStatus(u)
	if err != nil {
		return Verdict{}, fmt.Errorf("flux: %w", err)
	}
	a, err := ArgoCD(u)
	if err != nil {
		return Verdict{}, fmt.Errorf("argo cd: %w", err)
	}
	return Verdict{KStatus: k.Status.String(), Flux: f.String(), ArgoCD: a.Status}, nil
}

// KStatus is kstatus's result for obj.
func KStatus(obj any) (*status.Result, error) {
	u, err := toUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return status.Compute(u)
}

// toUnstructured decodes obj as the API machinery does: integers as
// int64, which kstatus insists on for generations.
func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	return u, nil
}

// ArgoHealth is what an Argo CD health check returns.
type ArgoHealth struct {
	Status  string
	Message string
}

// argoHealthStatuses are the codes Argo CD accepts from a health check;
// any other it reports as Unknown.
var argoHealthStatuses = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true,
}

// ArgoCD runs the shipped health check on obj as Argo CD does: a state
// with only the package, base and table libraries, obj as a global table
// made of the unstructured object, a one-second budget, and a returned
// table read as {status, message}.
func ArgoCD(obj any) (ArgoHealth, error) {
	u, err := toUnstructured(obj)
	if err != nil {
		return ArgoHealth{}, err
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return ArgoHealth{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", luaValue(l, u.Object))
	if err := l.DoString(gitops.ArgoCDHealthLua); err != nil {
		return ArgoHealth{}, err
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return ArgoHealth{}, fmt.Errorf("the health check returned a %s, not a table", l.Get(-1).Type())
	}
	h := ArgoHealth{Status: lua.LVAsString(ret.RawGetString("status")), Message: lua.LVAsString(ret.RawGetString("message"))}
	if !argoHealthStatuses[h.Status] {
		return h, fmt.Errorf("the health check returned status %q, which Argo CD reports as Unknown", h.Status)
	}
	return h, nil
}

// luaValue is Argo CD's decodeValue: JSON values as Lua values, arrays as
// sequences.
func luaValue(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(luaValue(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for k, item := range v {
			t.RawSetH(lua.LString(k), luaValue(l, item))
		}
		return t
	}
	return lua.LNil
}

// fluxExprs are the healthCheckExprs of the shipped Flux Kustomization.
type fluxExprs struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	InProgress string `yaml:"inProgress"`
	Failed     string `yaml:"failed"`
	Current    string `yaml:"current"`
}

// FluxExprs returns the shipped expressions, by "apiVersion/kind".
func FluxExprs() (map[string]fluxExprs, error) {
	var k struct {
		Spec struct {
			HealthCheckExprs []fluxExprs `yaml:"healthCheckExprs"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(gitops.FluxKustomization, &k); err != nil {
		return nil, err
	}
	out := map[string]fluxExprs{}
	for _, e := range k.Spec.HealthCheckExprs {
		out[e.APIVersion+"/"+e.Kind] = e
	}
	return out, nil
}

// fluxStatus is Flux's StatusEvaluator (RFC 0009) with the shipped
// expressions: an observedGeneration behind the generation is InProgress;
// then inProgress, failed and current in that order, the first true one
// deciding; none true is InProgress.
func fluxStatus(u *unstructured.Unstructured) (status.Status, error) {
	all, err := FluxExprs()
	if err != nil {
		return "", err
	}
	e, ok := all[u.GetAPIVersion()+"/"+u.GetKind()]
	if !ok {
		return "", fmt.Errorf("no healthCheckExprs for %s %s", u.GetAPIVersion(), u.GetKind())
	}
	obj := u.UnstructuredContent()
	if observed, ok, err := unstructured.NestedInt64(obj, "status", "observedGeneration"); err != nil {
		return "", err
	} else if ok && observed != u.GetGeneration() {
		return status.InProgressStatus, nil
	}
	for _, step := range []struct {
		expr   string
		result status.Status
	}{{e.InProgress, status.InProgressStatus}, {e.Failed, status.FailedStatus}, {e.Current, status.CurrentStatus}} {
		if step.expr == "" {
			continue
		}
		ok, err := evalFlux(step.expr, obj)
		if errors.Is(err, errEval) {
			// kstatus's generic status reader, which Flux runs the
			// evaluator in, reports a failed evaluation as Unknown, and
			// Flux waits on.
			return status.UnknownStatus, nil
		}
		if err != nil {
			return "", err
		}
		if ok {
			return step.result, nil
		}
	}
	return status.InProgressStatus, nil
}

// errEval is an expression that parsed and failed on the object, as one
// naming a field the object lacks does.
var errEval = errors.New("evaluation failed")

// evalFlux evaluates one expression in Flux's CEL environment: parsed,
// not compiled (a custom resource's fields are not declared), with the
// object's top-level fields as the variables.
func evalFlux(expr string, obj map[string]any) (bool, error) {
	env, err := cel.NewEnv(
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Sets(),
		ext.Encoders(),
	)
	if err != nil {
		return false, err
	}
	ast, issues := env.Parse(expr)
	if issues != nil && issues.Err() != nil {
		return false, fmt.Errorf("parse %q: %w", expr, issues.Err())
	}
	prog, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.InterruptCheckFrequency(100))
	if err != nil {
		return false, err
	}
	val, _, err := prog.Eval(obj)
	if err != nil {
		return false, fmt.Errorf("%w: %q: %v", errEval, expr, err)
	}
	b, ok := val.(types.Bool)
	if !ok {
		return false, fmt.Errorf("%q is not a boolean: %v", expr, val)
	}
	return bool(b), nil
}
