package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Related objects: the customize hook names the objects of other kinds a
// parent's requests carry, and a change to one syncs the parents of its
// namespace.

// relatedKinds maps the resources a customize hook may name to their kind.
var relatedKinds = map[string]string{"secrets": "Secret", "persistentvolumeclaims": "PersistentVolumeClaim",
	"etcdclusters": "EtcdCluster", "etcdbackups": "EtcdBackup", "etcdrestores": "EtcdRestore"}

func (mc *Metacontroller) isRelatedType(typ string) bool {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.relatedTypes[typ]
}

// related asks the customize hook what to relate and collects it, as
// Metacontroller does with hook version v1: objects of the parent's own
// namespace, keyed by type and then by name, chosen by names or by a label
// selector (an empty one selects every object), never both.
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
	for _, r := range out.RelatedResources {
		kind, ok := relatedKinds[r.Resource]
		if !ok {
			return nil, fmt.Errorf("customize hook: resource %q is not known to the harness", r.Resource)
		}
		if r.Namespace != "" && r.Namespace != ns {
			return nil, fmt.Errorf("customize hook: namespace %q differs from the parent's (hook version v1)", r.Namespace)
		}
		if r.LabelSelector != nil && (len(r.Names) > 0 || r.Namespace != "") {
			// As Metacontroller's customize manager: the sync fails.
			return nil, fmt.Errorf("customize hook: %s: related rule cannot have both labelSelector and Namespace/Names", r.Resource)
		}
		typ := kind + "." + r.APIVersion
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
		for _, obj := range mc.api.List(typ, ns) {
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
	return related, nil
}
