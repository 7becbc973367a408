package harness

import "encoding/json"

// Metacontroller updates children with its own emulation of kubectl apply: a
// three-way merge of the live object, the last-applied configuration (kept in
// an annotation) and the hook's desired object. Fields the hook stops setting
// are removed, fields somebody else set (defaults, status, the PV binder's
// volumeName) are kept, and lists of objects sharing a key field are merged by
// that key rather than replaced.

// listMapKeys are tried in order to decide whether a list is an associative
// list and by which field.
var listMapKeys = []string{"containerPort", "port", "name", "uid", "ip"}

// applyMerge returns observed with desired applied on top of lastApplied.
// None of the arguments is modified.
func applyMerge(observed, lastApplied, desired Object) Object {
	out := copyObject(observed)
	if out == nil {
		out = Object{}
	}
	mergeObject(out, lastApplied, desired)
	return out
}

func mergeObject(dst, last, des map[string]any) {
	for k := range last {
		if _, keep := des[k]; !keep {
			delete(dst, k)
		}
	}
	for k, v := range des {
		var l any
		if last != nil {
			l = last[k]
		}
		dst[k] = mergeValue(dst[k], l, v)
	}
}

func mergeValue(dst, last, des any) any {
	switch d := des.(type) {
	case map[string]any:
		dm, ok := dst.(map[string]any)
		if !ok {
			return deepCopyJSON(d)
		}
		lm, _ := last.(map[string]any)
		mergeObject(dm, lm, d)
		return dm
	case []any:
		dl, ok := dst.([]any)
		if !ok {
			return deepCopyJSON(d)
		}
		ll, _ := last.([]any)
		if key := listMapKey(dl, ll, d); key != "" {
			return mergeListMap(key, dl, ll, d)
		}
		return deepCopyJSON(d)
	default:
		return deepCopyJSON(des)
	}
}

// listMapKey returns the first key present in every element of every list,
// or "" when the lists are not lists of objects with a common key.
func listMapKey(lists ...[]any) string {
	for _, key := range listMapKeys {
		ok, seen := true, false
		for _, l := range lists {
			for _, item := range l {
				m, isMap := item.(map[string]any)
				if !isMap {
					return ""
				}
				if _, has := m[key]; !has {
					ok = false
				}
				seen = true
			}
		}
		if ok && seen {
			return key
		}
	}
	return ""
}

func keyOf(item any, key string) string {
	m, _ := item.(map[string]any)
	b, _ := json.Marshal(m[key])
	return string(b)
}

// mergeListMap keeps the live order, drops items the hook no longer wants,
// merges the ones it still wants and appends new ones in its order.
func mergeListMap(key string, dst, last, des []any) []any {
	desired := map[string]any{}
	for _, d := range des {
		desired[keyOf(d, key)] = d
	}
	lastByKey := map[string]any{}
	for _, l := range last {
		lastByKey[keyOf(l, key)] = l
	}
	out := make([]any, 0, len(dst)+len(des))
	present := map[string]bool{}
	for _, item := range dst {
		k := keyOf(item, key)
		d, wanted := desired[k]
		if !wanted {
			if _, applied := lastByKey[k]; applied {
				continue
			}
			out = append(out, item)
			present[k] = true
			continue
		}
		out = append(out, mergeValue(item, lastByKey[k], d))
		present[k] = true
	}
	for _, d := range des {
		if k := keyOf(d, key); !present[k] {
			out = append(out, deepCopyJSON(d))
			present[k] = true
		}
	}
	return out
}
