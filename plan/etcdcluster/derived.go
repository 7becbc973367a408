package etcdcluster

import (
	"encoding/json"

	"github.com/etcdhook/etcd-hook/plan"
)

// Derive works out, ahead of planning, what the planner takes from the
// request alone whatever etcd says: the metadata each member Pod was last
// applied with (see currentPod), which is most of a steady plan's own
// work. The reconciler calls it while the sync's read of etcd is in
// flight, so that this work overlaps the round trip instead of following
// it; and a sync that plans more than once does it once.
//
// Plan works out whatever Derive did not, and the same way: each result
// is kept under the exact input it was derived from, so that a request
// changed after Derive is never planned on another input's result. Call
// it before planning, never while Plan runs on the same observation; a
// second call does nothing.
func Derive(o *Observed) {
	if o.derived != nil {
		return
	}
	d := &derived{applied: make(map[string]appliedResult, len(o.Pods))}
	for _, pod := range o.Pods {
		if raw, ok := pod.Annotations[plan.LastAppliedAnnotation]; ok {
			if _, done := d.applied[raw]; !done {
				meta, ok := decodeApplied(raw)
				d.applied[raw] = appliedResult{meta, ok}
			}
		}
	}
	o.derived = d
}

// derived is what Derive worked out for one observation. It is only read
// once made.
type derived struct {
	// applied is decodeApplied's result for each last applied
	// configuration, by its exact text.
	applied map[string]appliedResult
}

type appliedResult struct {
	meta appliedMeta
	ok   bool
}

// appliedMeta is the part of a Pod's last applied configuration that
// currentPod compares, decoded as corev1.Pod decodes it.
type appliedMeta struct {
	Metadata struct {
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata,omitempty"`
}

// decodeApplied decodes the metadata of a last applied configuration. ok
// means that the configuration is valid JSON (so plan.KeepPod keeps it
// as it is) whose metadata decodes as decoding the whole Pod would decode
// it (podObject).
func decodeApplied(raw string) (appliedMeta, bool) {
	var m appliedMeta
	err := json.Unmarshal([]byte(raw), &m)
	return m, err == nil
}

// appliedMetaOf is decodeApplied's result for raw, as Derive found it if
// it did.
func (p *planner) appliedMetaOf(raw string) (appliedMeta, bool) {
	if d := p.o.derived; d != nil {
		if r, ok := d.applied[raw]; ok {
			return r.meta, r.ok
		}
	}
	return decodeApplied(raw)
}
