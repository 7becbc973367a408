package harness

import (
	"math"
	"reflect"
	"strconv"
	"strings"
)

// matchLabelSelector evaluates a metav1.LabelSelector in unstructured form.
// As in Kubernetes, a nil selector matches nothing and an empty one everything.
func matchLabelSelector(sel any, labels map[string]string) bool {
	m, ok := sel.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range stringMap(m["matchLabels"]) {
		if labels[k] != v {
			return false
		}
	}
	exprs, _ := m["matchExpressions"].([]any)
	for _, e := range exprs {
		em, _ := e.(map[string]any)
		key, _ := em["key"].(string)
		op, _ := em["operator"].(string)
		var values []string
		vl, _ := em["values"].([]any)
		for _, v := range vl {
			if s, ok := v.(string); ok {
				values = append(values, s)
			}
		}
		val, has := labels[key]
		switch op {
		case "In":
			if !has || !containsString(values, val) {
				return false
			}
		case "NotIn":
			if has && containsString(values, val) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// matchServiceSelector evaluates a Service's plain map selector. A Service
// without a selector has no endpoints managed for it.
func matchServiceSelector(sel any, labels map[string]string) bool {
	m, ok := sel.(map[string]any)
	if !ok || len(m) == 0 {
		return false
	}
	for k, v := range stringMap(m) {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func podLabels(pod Object) map[string]string { return stringMap(nestedMap(pod, "metadata", "labels")) }

// podReady reads the Ready condition the kubelet maintains.
func podReady(pod Object) bool {
	conds, _ := nested(pod, "status", "conditions")
	list, _ := conds.([]any)
	for _, c := range list {
		if nestedString(c, "type") == "Ready" {
			return nestedString(c, "status") == "True"
		}
	}
	return false
}

// disruptionLocked plays the disruption controller for the PDBs of a namespace.
// Pods here have no scalable controller (their owner is the EtcdCluster), so
// percentages and maxUnavailable are taken against the number of matching Pods,
// an approximation documented in doc.go.
func (s *APIServer) disruptionLocked(namespace string) {
	pdbs := s.listLocked(TypePDB, namespace, false)
	if len(pdbs) == 0 {
		return
	}
	pods := s.listLocked(TypePod, namespace, false)
	for _, pdb := range pdbs {
		sel, hasSel := nested(pdb, "spec", "selector")
		expected, healthy := 0, 0
		if hasSel {
			for _, p := range pods {
				if !matchLabelSelector(sel, podLabels(p)) {
					continue
				}
				phase := nestedString(p, "status", "phase")
				if phase == "Succeeded" || phase == "Failed" {
					continue
				}
				expected++
				if podReady(p) && !isTerminating(p) {
					healthy++
				}
			}
		}
		desired := 0
		if v, ok := nested(pdb, "spec", "minAvailable"); ok {
			desired = scaledIntOrPercent(v, expected, true)
		} else if v, ok := nested(pdb, "spec", "maxUnavailable"); ok {
			desired = expected - scaledIntOrPercent(v, expected, true)
			if desired < 0 {
				desired = 0
			}
		}
		allowed := healthy - desired
		if allowed < 0 {
			allowed = 0
		}
		gen, _ := nestedInt(pdb, "metadata", "generation")
		condStatus, reason := "False", "InsufficientPods"
		if allowed > 0 {
			condStatus, reason = "True", "SufficientPods"
		}
		old := nestedMap(pdb, "status")
		transition := timestamp(s.now())
		if oc := pdbCondition(old); oc != nil && nestedString(oc, "status") == condStatus {
			transition = nestedString(oc, "lastTransitionTime")
		}
		st := map[string]any{
			"observedGeneration": float64(gen),
			"disruptionsAllowed": float64(allowed),
			"currentHealthy":     float64(healthy),
			"desiredHealthy":     float64(desired),
			"expectedPods":       float64(expected),
			"conditions": []any{map[string]any{
				"type":               "DisruptionAllowed",
				"status":             condStatus,
				"reason":             reason,
				"message":            "",
				"observedGeneration": float64(gen),
				"lastTransitionTime": transition,
			}},
		}
		if reflect.DeepEqual(map[string]any(old), st) {
			continue
		}
		next := copyObject(pdb)
		next["status"] = st
		ensureMap(next, "metadata")["resourceVersion"] = s.nextRV()
		s.objs[RefOf(next)] = next
		s.emit(Modified, next)
	}
}

func pdbCondition(status map[string]any) map[string]any {
	list, _ := status["conditions"].([]any)
	for _, c := range list {
		if m, ok := c.(map[string]any); ok && m["type"] == "DisruptionAllowed" {
			return m
		}
	}
	return nil
}

// scaledIntOrPercent resolves an IntOrString against total, like
// intstr.GetScaledValueFromIntOrPercent.
func scaledIntOrPercent(v any, total int, roundUp bool) int {
	switch t := v.(type) {
	case float64:
		return int(t)
	case string:
		if p, ok := strings.CutSuffix(t, "%"); ok {
			n, err := strconv.Atoi(p)
			if err != nil {
				return 0
			}
			f := float64(n) * float64(total) / 100
			if roundUp {
				return int(math.Ceil(f))
			}
			return int(math.Floor(f))
		}
		n, _ := strconv.Atoi(t)
		return n
	}
	return 0
}
