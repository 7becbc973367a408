package harness

import (
	"fmt"
	"strings"
	"time"
)

// What the emulator saw, for tests and for the dump of a failed one:
// counters per parent, the hook exchanges, and the child operations the API
// server refused.

// Metrics counts what happened to one parent (or all of them).
type Metrics struct {
	Syncs        int // /sync calls made
	Finalizes    int // /finalize calls made
	HookErrors   int // calls that applied nothing: transport error, timeout, non-200, bad JSON, invalid answer
	ApplyErrors  int // child operations the API server refused, after a 200
	ChildCreates int
	ChildUpdates int
	ChildDeletes int
	// ChildCreatesExisting counts creates the API server answered with
	// AlreadyExists, which Metacontroller logs and skips.
	ChildCreatesExisting int
	// ChildAdoptions and ChildReleases count the ownerReferences added to
	// orphans that match the parent's selector and removed from objects it
	// controls that do not (metacontroller_claim.go).
	ChildAdoptions int
	ChildReleases  int
	StatusUpdates  int
	// StatusDropped counts status writes skipped by DropStatusWrites.
	StatusDropped int
}

func (m *Metrics) add(o Metrics) {
	m.Syncs += o.Syncs
	m.Finalizes += o.Finalizes
	m.HookErrors += o.HookErrors
	m.ApplyErrors += o.ApplyErrors
	m.ChildCreates += o.ChildCreates
	m.ChildUpdates += o.ChildUpdates
	m.ChildDeletes += o.ChildDeletes
	m.ChildCreatesExisting += o.ChildCreatesExisting
	m.ChildAdoptions += o.ChildAdoptions
	m.ChildReleases += o.ChildReleases
	m.StatusUpdates += o.StatusUpdates
	m.StatusDropped += o.StatusDropped
}

// SyncRecord is one hook exchange.
type SyncRecord struct {
	Parent      string // namespace/name
	Finalizing  bool
	Start       time.Time
	Duration    time.Duration
	HTTPStatus  int // 0 when no answer came
	Err         error
	Request     []byte
	Response    []byte
	ResyncAfter float64
	Finalized   bool
}

// ApplyError is a child operation that failed after the hook answered 200,
// e.g. a Pod update that changes an immutable field.
type ApplyError struct {
	Time   time.Time
	Parent string
	Child  Ref
	Op     string // create, update, delete
	Err    error
}

func (e ApplyError) Error() string {
	return fmt.Sprintf("%s %s %s (parent %s): %v", e.Time.Format("15:04:05.000"), e.Op, e.Child, e.Parent, e.Err)
}

func (mc *Metacontroller) count(key string, f func(*Metrics)) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	m, ok := mc.metrics[key]
	if !ok {
		m = &Metrics{}
		mc.metrics[key] = m
	}
	f(m)
}

func (mc *Metacontroller) record(r SyncRecord) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.records = append(mc.records, r)
	if len(mc.records) > mc.cfg.RecordLimit {
		mc.records = mc.records[len(mc.records)-mc.cfg.RecordLimit:]
	}
}

func (mc *Metacontroller) applyError(parent string, child Ref, op string, err error) {
	e := ApplyError{Time: time.Now(), Parent: parent, Child: child, Op: op, Err: err}
	mc.mu.Lock()
	mc.applyErrs = append(mc.applyErrs, e)
	mc.mu.Unlock()
	mc.count(parent, func(m *Metrics) { m.ApplyErrors++ })
	mc.cfg.Logf("metacontroller: apply error: %v", e)
}

// Metrics returns the counters of one parent ("" for the sum of all).
func (mc *Metacontroller) Metrics(namespace, name string) Metrics {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if namespace == "" && name == "" {
		var total Metrics
		for _, m := range mc.metrics {
			total.add(*m)
		}
		return total
	}
	if m, ok := mc.metrics[namespace+"/"+name]; ok {
		return *m
	}
	return Metrics{}
}

// Records returns the kept hook exchanges of one parent ("" for all), oldest first.
func (mc *Metacontroller) Records(namespace, name string) []SyncRecord {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	var out []SyncRecord
	for _, r := range mc.records {
		if (namespace == "" && name == "") || r.Parent == namespace+"/"+name {
			out = append(out, r)
		}
	}
	return out
}

// ApplyErrors returns every child operation refused so far.
func (mc *Metacontroller) ApplyErrors() []ApplyError {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return append([]ApplyError(nil), mc.applyErrs...)
}

// TakeApplyErrors returns the apply errors not taken before and marks them as
// expected, so that the end-of-test check does not report them.
func (mc *Metacontroller) TakeApplyErrors() []ApplyError {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	out := append([]ApplyError(nil), mc.applyErrs[mc.taken:]...)
	mc.taken = len(mc.applyErrs)
	return out
}

func (mc *Metacontroller) untakenApplyErrors() []ApplyError {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return append([]ApplyError(nil), mc.applyErrs[mc.taken:]...)
}

// describeRecord renders one exchange for logs.
func describeRecord(r SyncRecord) string {
	kind := "sync"
	if r.Finalizing {
		kind = "finalize"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s HTTP %d in %s", r.Start.Format("15:04:05.000"), kind, r.Parent, r.HTTPStatus, r.Duration.Round(time.Millisecond))
	if r.Err != nil {
		fmt.Fprintf(&b, " error: %v", r.Err)
	}
	if r.ResyncAfter > 0 {
		fmt.Fprintf(&b, " resyncAfter=%gs", r.ResyncAfter)
	}
	if r.Finalized {
		b.WriteString(" finalized")
	}
	return b.String()
}
