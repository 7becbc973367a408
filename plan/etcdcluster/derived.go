package etcdcluster

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/plan"
)

// Derive works out, ahead of planning, what the planner takes from the
// request alone whatever etcd says: the metadata each member Pod was last
// applied with (see currentPod) and the pod-spec hash (see rollout.go),
// which were most of a steady plan's own work. The reconciler calls it while the sync's read of etcd is in
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
				d.applied[raw] = appliedDecodes.decode(pod.UID, raw)
			}
		}
	}
	d.hashOf, d.podHash = o.Cluster, podHashes.of(o)
	o.derived = d
}

// derived is what Derive worked out for one observation. It is only read
// once made.
type derived struct {
	// applied is decodeApplied's result for each last applied
	// configuration, by its exact text.
	applied map[string]appliedResult
	// podHash is podSpecHash of the spec of hashOf, the parent Derive saw:
	// a planner given another parent object works it out again.
	hashOf  *v1beta2.EtcdCluster
	podHash string
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

// appliedDecodes remembers decodeApplied's result for each member Pod's
// last applied configuration, so that a steady sync decodes none: it was
// most of a steady plan's work (21 µs for a 1.7 KiB configuration, for
// each member, on every resync). One entry per Pod UID, which its next
// configuration replaces, so the memo grows with the Pods, not with their
// versions; the bound only stops a runaway.
var appliedDecodes = newAppliedMemo(1 << 16)

// appliedMemo is keyed by Pod UID and checked against the configuration's
// length and a 64-bit hash of its text under a seed chosen at start: a
// request that carries another text under a known UID (a hand-edited
// fixture, say) is decoded again, and two texts that collide are as
// likely as a random 64-bit match, with a seed no request can know.
type appliedMemo struct {
	seed    maphash.Seed
	entries *byUID[appliedEntry]
}

type appliedEntry struct {
	sum    uint64
	size   int
	result appliedResult
}

func newAppliedMemo(max int) *appliedMemo {
	return &appliedMemo{seed: maphash.MakeSeed(), entries: newByUID[appliedEntry](max)}
}

// decode is decodeApplied(raw), remembered under the Pod's UID. The
// result's maps are shared between syncs and only ever read.
func (a *appliedMemo) decode(uid types.UID, raw string) appliedResult {
	if uid == "" {
		meta, ok := decodeApplied(raw)
		return appliedResult{meta, ok}
	}
	sum := maphash.String(a.seed, raw)
	if e, ok := a.entries.get(uid); ok && e.sum == sum && e.size == len(raw) {
		return e.result
	}
	meta, valid := decodeApplied(raw)
	r := appliedResult{meta, valid}
	a.entries.put(uid, appliedEntry{sum: sum, size: len(raw), result: r})
	return r
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

// appliedMetaOf is decodeApplied's result for the Pod's last applied
// configuration raw, as Derive found it if it did.
func (p *planner) appliedMetaOf(pod *corev1.Pod, raw string) (appliedMeta, bool) {
	if d := p.o.derived; d != nil {
		if r, ok := d.applied[raw]; ok {
			return r.meta, r.ok
		}
	}
	r := appliedDecodes.decode(pod.UID, raw)
	return r.meta, r.ok
}

// podHashes remembers the pod-spec hash of each cluster's spec under the
// spec's text as the request carried it (Observed.SpecText). The hash is
// a JSON encoding and a SHA-256 of the defaulted spec, 10 µs of a steady
// sync's CPU in the bench rig, and a spec's text changes only when
// someone edits it. The hash is a function of the decoded spec, and the
// decoded spec of its text, so the text compared whole is an exact key.
// One entry per cluster UID, replaced by its next text.
var podHashes = newSpecMemo(1 << 16)

type specMemo struct{ entries *byUID[specEntry] }

type specEntry struct {
	text []byte
	hash string
}

func newSpecMemo(max int) *specMemo { return &specMemo{newByUID[specEntry](max)} }

// of is podSpecHash of o's defaulted spec.
func (s *specMemo) of(o *Observed) string {
	uid := o.Cluster.UID
	if uid == "" || len(o.SpecText) == 0 {
		return podSpecHash(o.Cluster.Spec.WithDefaults())
	}
	if e, ok := s.entries.get(uid); ok && bytes.Equal(e.text, o.SpecText) {
		return e.hash
	}
	h := podSpecHash(o.Cluster.Spec.WithDefaults())
	s.entries.put(uid, specEntry{text: bytes.Clone(o.SpecText), hash: h})
	return h
}

// byUID is what a memo keeps between syncs: one entry per object UID, which
// the object's next version replaces, so it grows with the objects and not
// with their versions. The bound only stops a runaway: a full map is
// forgotten whole rather than tracking recency, since it means tens of
// thousands of objects, each worked out again once.
type byUID[E any] struct {
	max int
	mu  sync.Mutex
	m   map[types.UID]E
}

func newByUID[E any](max int) *byUID[E] { return &byUID[E]{max: max, m: map[types.UID]E{}} }

func (b *byUID[E]) get(uid types.UID) (E, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[uid]
	return e, ok
}

func (b *byUID[E]) put(uid types.UID, e E) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) >= b.max {
		clear(b.m)
	}
	b.m[uid] = e
}

func (b *byUID[E]) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// serviceRecords remembers the record's copy on each cluster's peer
// Service, decoded, under the annotation's exact text: the copy changes
// when the record does, and decoding it was 9 µs of a steady sync in the
// bench rig. One entry per Service UID, replaced by its next text.
var serviceRecords = newRecordMemo(1 << 16)

type recordMemo struct{ entries *byUID[recordEntry] }

type recordEntry struct {
	raw string
	rec v1beta2.BootstrapStatus
}

func newRecordMemo(max int) *recordMemo { return &recordMemo{newByUID[recordEntry](max)} }

// of is serviceRecord(s). Each call returns a record of its own, since
// the planner builds on it: a record with a restore's part (a pointer)
// is decoded again rather than shared.
func (m *recordMemo) of(s *corev1.Service) (*v1beta2.BootstrapStatus, string) {
	if s == nil || s.UID == "" {
		return serviceRecord(s)
	}
	raw := s.Annotations[AnnotationBootstrap]
	if e, ok := m.entries.get(s.UID); ok && e.raw == raw {
		rec := e.rec
		return &rec, raw
	}
	rec, text := serviceRecord(s)
	if rec != nil && rec.Restore == nil {
		m.entries.put(s.UID, recordEntry{raw: raw, rec: *rec})
	}
	return rec, text
}

// firstSeeds remembers each cluster's first seed name (SeedName, a
// SHA-256), under the cluster's UID and name.
var firstSeeds = newSeedMemo(1 << 16)

type seedMemo struct{ entries *byUID[seedEntry] }

type seedEntry struct{ cluster, seed string }

func newSeedMemo(max int) *seedMemo { return &seedMemo{newByUID[seedEntry](max)} }

func (m *seedMemo) of(c *v1beta2.EtcdCluster) string {
	if c.UID == "" {
		return SeedName(c.Name, string(c.UID))
	}
	if e, ok := m.entries.get(c.UID); ok && e.cluster == c.Name {
		return e.seed
	}
	seed := SeedName(c.Name, string(c.UID))
	m.entries.put(c.UID, seedEntry{cluster: c.Name, seed: seed})
	return seed
}
