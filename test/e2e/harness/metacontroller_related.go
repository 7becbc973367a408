package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Related objects: the customize hook names the objects of other kinds a
// parent's requests carry, and a change to one syncs the parents of its
// namespace, or for a cluster-scoped one the parents that relate its type.

// relatedKinds maps the resources a customize hook may name to their kind.
var relatedKinds = map[string]string{"secrets": "Secret", "persistentvolumeclaims": "PersistentVolumeClaim",
	"etcdclusters": "EtcdCluster", "etcdbackups": "EtcdBackup", "etcdrestores": "EtcdRestore",
	"storageclasses": "StorageClass"}

func (mc *Metacontroller) isRelatedType(typ string) bool {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.relatedTypes[typ]
}

// parentsRelating are the parents whose last customize answer named typ.
func (mc *Metacontroller) parentsRelating(typ string) []Ref {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	var out []Ref
	for _, key := range sortedKeys(mc.relatedBy) {
		if mc.relatedBy[key][typ] {
			ns, name, _ := strings.Cut(key, "/")
			out = append(out, mc.parentRef(ns, name))
		}
	}
	return out
}

// related asks the customize hook what to relate and collects it, as
// Metacontroller does with hook version v1: objects of the parent's own
// namespace, keyed by type and then by name, chosen by names or by a label
// selector (an empty one selects every object), never both. A
// cluster-scoped type (StorageClass) is listed cluster-wide, as from
// Metacontroller v4.15, and keyed by name.
func (mc *Metacontroller) related(ctx context.Context, parent Object) (map[string]map[string]Object, error) {
	body := mustJSON(map[string]any{"controller": mc.ctrl, "parent": parent})
	ctx, cancel := context.WithTimeout(ctx, mc.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, mc.cfg.CustomizeURL, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := mc.customizeClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("customize hook: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("customize hook: HTTP %d %s %v", resp.StatusCode, data, err)
	}
	var out struct {
		RelatedResources []struct {
			APIVersion    string         `json:"apiVersion"`
			Resource      string         `json:"resource"`
			Namespace     string         `json:"namespace"`
			Names         []string       `json:"names"`
			LabelSelector map[string]any `json:"labelSelector"`
		} `json:"relatedResources"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("customize hook: decode answer: %w", err)
	}
	ns := nestedString(parent, "metadata", "namespace")
	related := map[string]map[string]Object{}
	types := map[string]bool{}
	for _, r := range out.RelatedResources {
		kind, ok := relatedKinds[r.Resource]
		if !ok {
			return nil, fmt.Errorf("customize hook: resource %q is not known to the harness", r.Resource)
		}
		typ := kind + "." + r.APIVersion
		listNS := ns
		if clusterScoped(typ) {
			// A rule's namespace means nothing to a cluster-scoped type.
			listNS = ""
		} else if r.Namespace != "" && r.Namespace != ns {
			return nil, fmt.Errorf("customize hook: namespace %q differs from the parent's (hook version v1)", r.Namespace)
		}
		if r.LabelSelector != nil && (len(r.Names) > 0 || r.Namespace != "") {
			// As Metacontroller's customize manager: the sync fails.
			return nil, fmt.Errorf("customize hook: %s: related rule cannot have both labelSelector and Namespace/Names", r.Resource)
		}
		types[typ] = true
		mc.mu.Lock()
		if mc.relatedTypes == nil {
			mc.relatedTypes = map[string]bool{}
		}
		mc.relatedTypes[typ] = true
		mc.mu.Unlock()
		m := related[typ]
		if m == nil {
			m = map[string]Object{}
			related[typ] = m
		}
		for _, obj := range mc.api.List(typ, listNS) {
			name := nestedString(obj, "metadata", "name")
			var match bool
			if r.LabelSelector != nil {
				match = matchLabelSelector(r.LabelSelector, stringMap(nestedMap(obj, "metadata", "labels")))
			} else {
				match = containsString(r.Names, name)
			}
			if match {
				m[name] = obj
			}
		}
	}
	mc.mu.Lock()
	if mc.relatedBy == nil {
		mc.relatedBy = map[string]map[string]bool{}
	}
	mc.relatedBy[parentKey(RefOf(parent))] = types
	mc.mu.Unlock()
	return related, nil
}
