package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ChildType is one entry of the CompositeController's childResources.
type ChildType struct {
	APIVersion string // "v1", "policy/v1"
	Kind       string // "Pod"
	Resource   string // "pods"
	// UpdateMethod is InPlace, Recreate or OnDelete. Empty means OnDelete, as
	// in Metacontroller: existing children are then never updated.
	UpdateMethod string
}

// Key is the children map key of the type: Kind.apiVersion.
func (c ChildType) Key() string { return c.Kind + "." + c.APIVersion }

// DefaultChildTypes are the child types of
// manifests/metacontroller/compositecontroller.yaml, with its update
// strategies; keep them in line.
func DefaultChildTypes() []ChildType {
	return []ChildType{
		{APIVersion: "v1", Kind: "Pod", Resource: "pods", UpdateMethod: "InPlace"},
		{APIVersion: "v1", Kind: "Service", Resource: "services", UpdateMethod: "InPlace"},
		{APIVersion: "v1", Kind: "PersistentVolumeClaim", Resource: "persistentvolumeclaims", UpdateMethod: "OnDelete"},
		{APIVersion: "policy/v1", Kind: "PodDisruptionBudget", Resource: "poddisruptionbudgets", UpdateMethod: "InPlace"},
	}
}

// ControllerConfig configures the Metacontroller emulator. Zero values take
// the defaults in brackets.
type ControllerConfig struct {
	Name        string // CompositeController name; the finalizer is metacontroller.io/compositecontroller-<Name> [etcd-hook]
	SyncURL     string // required
	FinalizeURL string // required
	// Timeout of one hook call (Metacontroller's default is 10 s) [10s].
	Timeout time.Duration
	// ResyncPeriod is resyncPeriodSeconds: every parent is synced at least
	// this often. Negative means never (only events and resyncAfterSeconds)
	// [60s, as in manifests/metacontroller/compositecontroller.yaml].
	ResyncPeriod time.Duration
	// Retry backoff after a failed sync: Metacontroller doubles 5 ms up to
	// 1000 s; the cap is lowered for tests [5ms, 2s].
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Workers bounds concurrent syncs across parents, as Metacontroller's
	// worker pool does [5].
	Workers    int
	ChildTypes []ChildType // [DefaultChildTypes()]
	// RecordLimit is how many hook exchanges are kept [500].
	RecordLimit int
	Logf        func(format string, args ...any)

	// The parent kind [EtcdCluster]: its type key, kind and resource.
	ParentType, ParentKind, ParentResource string
	// CustomizeURL, when set, is the customize hook: it is asked before
	// every sync which related objects to send [none].
	CustomizeURL string

	// The hooks' webhook caBundle, for https URLs (Metacontroller v4.16+):
	// the CA certificates the hook's certificate is verified against,
	// instead of the system roots. A hook's own bundle wins over
	// EndpointConfigs. Secrets and ConfigMaps they name must exist when
	// NewMetacontroller is called: bundles are resolved once, when the
	// controller is created, as Metacontroller does [none].
	SyncCABundle, FinalizeCABundle, CustomizeCABundle *CABundle
	// EndpointConfigs is spec.endpointConfigs: the caBundle of the hooks
	// whose URL host matches an entry's host [none].
	EndpointConfigs []EndpointConfig

	// ParentCacheLag, when positive, serves each sync the parent as an
	// informer cache that lags the API server by this much would: the
	// newest version at least this old, or the oldest one kept of this
	// parent (same UID) when none is. See cachedParent [0: the parent is
	// read fresh from the API server]. SetParentCacheLag changes it later.
	ParentCacheLag time.Duration

	// ApplyOrder lists child type keys ("Service.v1") in the order their
	// creates and updates are made in each sync; types it leaves out
	// follow in ChildTypes order [ChildTypes order]. Metacontroller walks
	// a Go map of the desired children, so its order differs from sync to
	// sync: a promise that holds only in one order (a Service that must
	// not select Pods before they are labelled) is tested in the other.
	ApplyOrder []string
}

func (c *ControllerConfig) defaults() {
	if c.Name == "" {
		c.Name = "etcd-hook"
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.ResyncPeriod == 0 {
		c.ResyncPeriod = 60 * time.Second
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = 5 * time.Millisecond
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 2 * time.Second
	}
	if c.Workers == 0 {
		c.Workers = 5
	}
	if c.ChildTypes == nil {
		c.ChildTypes = DefaultChildTypes()
	}
	if c.RecordLimit == 0 {
		c.RecordLimit = 500
	}
	if c.ParentType == "" {
		c.ParentType, c.ParentKind, c.ParentResource = TypeEtcdCluster, "EtcdCluster", "etcdclusters"
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Metrics counts what happened to one parent (or all of them).
type Metrics struct {
	Syncs         int // /sync calls made
	Finalizes     int // /finalize calls made
	HookErrors    int // calls that applied nothing: transport error, timeout, non-200, bad JSON, invalid answer
	ApplyErrors   int // child operations the API server refused, after a 200
	ChildCreates  int
	ChildUpdates  int
	ChildDeletes  int
	StatusUpdates int
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

// Metacontroller emulates one CompositeController over EtcdCluster parents.
type Metacontroller struct {
	cfg   ControllerConfig
	api   *APIServer
	ctrl  Object
	types map[string]ChildType

	// One client per hook, each trusting exactly its resolved caBundle.
	syncClient, finalizeClient, customizeClient *http.Client

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sem    chan struct{}
	unsub  func()

	mu      sync.Mutex
	workers map[string]*parentWorker // by namespace/name
	// dropStatus lists parents whose status writes are skipped, as when
	// Metacontroller dies between applying children and writing status.
	dropStatus map[string]bool
	// relatedTypes are the type keys customize answers have named.
	relatedTypes map[string]bool
	// hideChildren lists parents whose requests show no child, as from an
	// informer cache that has not caught up.
	hideChildren map[string]bool
	metrics      map[string]*Metrics
	records      []SyncRecord
	applyErrs    []ApplyError
	taken        int // applyErrs[:taken] were handed to the test

	// parentLag is the current ParentCacheLag; parentVersions holds, by
	// namespace/name, the versions of each parent a lagging cache could
	// still serve, oldest first, all of one UID. See cachedParent.
	parentLag      time.Duration
	parentVersions map[string][]parentVersion
	// now is the clock of the parent cache [time.Now]; tests set it.
	now func() time.Time
}

// NewMetacontroller creates the emulator; Start makes it run. Like
// Metacontroller creating a controller for a CompositeController, it fails
// on a configuration it could not run: hook caBundles that cannot be
// resolved (a missing Secret, ConfigMap or key) or parsed.
func NewMetacontroller(api *APIServer, cfg ControllerConfig) (*Metacontroller, error) {
	cfg.defaults()
	if cfg.SyncURL == "" || cfg.FinalizeURL == "" {
		return nil, errors.New("metacontroller: SyncURL and FinalizeURL are required")
	}
	for i, ec := range cfg.EndpointConfigs {
		if ec.Host == "" {
			return nil, fmt.Errorf("metacontroller %s: spec.endpointConfigs[%d].host: Required value", cfg.Name, i)
		}
	}
	mc := &Metacontroller{
		cfg: cfg, api: api,
		types:   map[string]ChildType{},
		sem:     make(chan struct{}, cfg.Workers),
		workers: map[string]*parentWorker{}, metrics: map[string]*Metrics{},
		parentLag: cfg.ParentCacheLag, parentVersions: map[string][]parentVersion{}, now: time.Now,
	}
	hooks := []struct {
		name   string
		url    string
		bundle *CABundle
		client **http.Client
	}{
		{"sync", cfg.SyncURL, cfg.SyncCABundle, &mc.syncClient},
		{"finalize", cfg.FinalizeURL, cfg.FinalizeCABundle, &mc.finalizeClient},
		{"customize", cfg.CustomizeURL, cfg.CustomizeCABundle, &mc.customizeClient},
	}
	for _, h := range hooks {
		if h.url == "" {
			continue
		}
		c, err := hookClient(api, h.url, h.bundle, cfg.EndpointConfigs, cfg.Workers)
		if err != nil {
			return nil, fmt.Errorf("metacontroller %s: can't resolve endpoint config for %s hook: %w", cfg.Name, h.name, err)
		}
		*h.client = c
	}
	var childResources []any
	for _, t := range cfg.ChildTypes {
		mc.types[t.Key()] = t
		method := t.UpdateMethod
		if method == "" {
			method = "OnDelete"
		}
		childResources = append(childResources, map[string]any{
			"apiVersion": t.APIVersion, "resource": t.Resource,
			"updateStrategy": map[string]any{"method": method},
		})
	}
	webhook := func(url string, bundle *CABundle) map[string]any {
		w := map[string]any{"url": url, "timeout": cfg.Timeout.String()}
		if bundle != nil {
			w["caBundle"] = bundle.withDefaults()
		}
		return map[string]any{"version": "v1", "webhook": w}
	}
	spec := map[string]any{
		"generateSelector": true,
		"parentResource":   map[string]any{"apiVersion": "etcd.database.coreos.com/v1beta2", "resource": cfg.ParentResource},
		"childResources":   childResources,
		"hooks": map[string]any{
			"sync":     webhook(cfg.SyncURL, cfg.SyncCABundle),
			"finalize": webhook(cfg.FinalizeURL, cfg.FinalizeCABundle),
		},
	}
	if cfg.CustomizeURL != "" {
		spec["hooks"].(map[string]any)["customize"] = webhook(cfg.CustomizeURL, cfg.CustomizeCABundle)
	}
	if len(cfg.EndpointConfigs) > 0 {
		var ecs []any
		for _, ec := range cfg.EndpointConfigs {
			ec.CABundle = ec.CABundle.withDefaults()
			ecs = append(ecs, ec)
		}
		spec["endpointConfigs"] = ecs
	}
	if cfg.ResyncPeriod > 0 {
		spec["resyncPeriodSeconds"] = cfg.ResyncPeriod.Seconds()
	}
	ctrl, err := normalize(map[string]any{
		"apiVersion": "metacontroller.k8s.io/v1alpha1",
		"kind":       "CompositeController",
		"metadata":   map[string]any{"name": cfg.Name, "uid": newUID(), "generation": 1, "resourceVersion": "1"},
		"spec":       spec,
		"status":     map[string]any{},
	})
	if err != nil {
		return nil, err
	}
	mc.ctrl = ctrl
	return mc, nil
}

// Finalizer is the finalizer this controller puts on parents.
func (mc *Metacontroller) Finalizer() string {
	return "metacontroller.io/compositecontroller-" + mc.cfg.Name
}

// Start begins watching parents and children.
func (mc *Metacontroller) Start(ctx context.Context) {
	mc.ctx, mc.cancel = context.WithCancel(ctx)
	mc.unsub = mc.api.Subscribe(mc.onEvent)
	for _, p := range mc.api.List(mc.cfg.ParentType, "") {
		mc.observeParent(p)
		mc.enqueue(RefOf(p))
	}
}

// Stop ends all workers; an in-flight hook call is cancelled.
func (mc *Metacontroller) Stop() {
	if mc.unsub != nil {
		mc.unsub()
	}
	if mc.cancel != nil {
		mc.cancel()
	}
	mc.wg.Wait()
	for _, c := range []*http.Client{mc.syncClient, mc.finalizeClient, mc.customizeClient} {
		if c != nil {
			c.CloseIdleConnections()
		}
	}
}

func (mc *Metacontroller) onEvent(ev Event) {
	if ev.Ref.Type == mc.cfg.ParentType {
		if ev.Type == Deleted {
			mc.forgetParent(ev.Ref)
			return
		}
		mc.observeParent(ev.Object)
		mc.enqueue(ev.Ref)
		return
	}
	if mc.isRelatedType(ev.Ref.Type) {
		// A related object changed: sync every parent of its namespace, a
		// superset of those that relate it.
		for _, p := range mc.api.List(mc.cfg.ParentType, ev.Ref.Namespace) {
			mc.enqueue(RefOf(p))
		}
		return
	}
	if _, ok := mc.types[ev.Ref.Type]; !ok {
		return
	}
	refs, _ := nested(ev.Object, "metadata", "ownerReferences")
	list, _ := refs.([]any)
	for _, r := range list {
		m, _ := r.(map[string]any)
		if c, _ := m["controller"].(bool); c && m["kind"] == mc.cfg.ParentKind {
			name, _ := m["name"].(string)
			mc.enqueue(Ref{Type: mc.cfg.ParentType, Namespace: ev.Ref.Namespace, Name: name})
		}
	}
}

func parentKey(ref Ref) string { return ref.Namespace + "/" + ref.Name }

// enqueue asks for a sync of the parent, creating its worker. Workers are
// keyed by namespace/name like Metacontroller's queue, so that a parent
// deleted and re-created under the same name is still never synced twice at
// once. They live until Stop.
func (mc *Metacontroller) enqueue(ref Ref) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.ctx == nil || mc.ctx.Err() != nil {
		return
	}
	key := parentKey(ref)
	w, ok := mc.workers[key]
	if !ok {
		w = &parentWorker{mc: mc, ref: ref, dirty: make(chan struct{}, 1), resched: make(chan struct{}, 1)}
		mc.workers[key] = w
		mc.wg.Add(1)
		go w.run()
	}
	w.poke()
}

// Enqueue forces a sync of a parent, as any watch event would.
func (mc *Metacontroller) Enqueue(namespace, name string) {
	mc.enqueue(Ref{Type: mc.cfg.ParentType, Namespace: namespace, Name: name})
}

type parentWorker struct {
	mc      *Metacontroller
	ref     Ref
	dirty   chan struct{}
	resched chan struct{}

	mu       sync.Mutex
	nextAt   time.Time
	failures int
}

func (w *parentWorker) poke() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

// requeueAfter schedules a sync; the earliest pending time wins, as in
// client-go's delaying queue.
func (w *parentWorker) requeueAfter(d time.Duration) {
	w.mu.Lock()
	t := time.Now().Add(d)
	if w.nextAt.IsZero() || t.Before(w.nextAt) {
		w.nextAt = t
	}
	w.mu.Unlock()
	select {
	case w.resched <- struct{}{}:
	default:
	}
}

func (w *parentWorker) run() {
	defer w.mc.wg.Done()
	ctx := w.mc.ctx
	for {
		w.mu.Lock()
		next := w.nextAt
		w.mu.Unlock()
		var timer <-chan time.Time
		var t *time.Timer
		if !next.IsZero() {
			t = time.NewTimer(time.Until(next))
			timer = t.C
		}
		fired, resched := false, false
		select {
		case <-ctx.Done():
		case <-w.resched:
			resched = true
		case <-w.dirty:
		case <-timer:
			fired = true
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		if resched {
			continue
		}
		if fired {
			w.mu.Lock()
			if !w.nextAt.After(time.Now()) {
				w.nextAt = time.Time{}
			}
			w.mu.Unlock()
		}
		select {
		case w.mc.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		err := w.mc.syncParent(ctx, w)
		<-w.mc.sem
		if ctx.Err() != nil {
			return
		}
		var ra retryAfterError
		switch {
		case errors.As(err, &ra):
			w.requeueAfter(ra.after)
		case err != nil:
			w.mu.Lock()
			d := w.mc.cfg.BackoffBase << min(w.failures, 30)
			if d > w.mc.cfg.BackoffMax || d <= 0 {
				d = w.mc.cfg.BackoffMax
			}
			w.failures++
			w.mu.Unlock()
			w.mc.cfg.Logf("metacontroller: sync %s failed, retry in %s: %v", parentKey(w.ref), d, err)
			w.requeueAfter(d)
		default:
			w.mu.Lock()
			w.failures = 0
			w.mu.Unlock()
		}
		if w.mc.cfg.ResyncPeriod > 0 {
			w.requeueAfter(w.mc.cfg.ResyncPeriod)
		}
	}
}

// retryAfterError is a 429 with Retry-After: retried later, not an error.
type retryAfterError struct{ after time.Duration }

func (e retryAfterError) Error() string { return fmt.Sprintf("hook asked to retry after %s", e.after) }

type hookResponse struct {
	Status             map[string]any   `json:"status"`
	Children           []map[string]any `json:"children"`
	ResyncAfterSeconds float64          `json:"resyncAfterSeconds"`
	Finalized          bool             `json:"finalized"`
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

// syncParent is one pass of Metacontroller's sync for a parent.
func (mc *Metacontroller) syncParent(ctx context.Context, w *parentWorker) error {
	key := parentKey(w.ref)
	parent, ok := mc.api.Get(w.ref)
	if !ok {
		return nil
	}
	parent = mc.cachedParent(parent)
	finalizing := isTerminating(parent)
	fin := mc.Finalizer()
	if !containsString(finalizersOf(parent), fin) {
		if finalizing {
			return nil // not ours to finalize
		}
		// With a finalize hook, Metacontroller puts its finalizer on the
		// parent before the first call; the captured first request has it.
		p, err := mc.api.Mutate(w.ref, func(o Object) error {
			setFinalizers(o, appendUnique(finalizersOf(o), fin))
			return nil
		})
		if err != nil {
			return fmt.Errorf("add finalizer: %w", err)
		}
		parent = p
	}
	uid := nestedString(parent, "metadata", "uid")
	observed := mc.observedChildren(parent)
	related := map[string]map[string]Object{}
	if mc.cfg.CustomizeURL != "" {
		var err error
		if related, err = mc.related(ctx, parent); err != nil {
			mc.count(key, func(m *Metrics) { m.HookErrors++ })
			return err
		}
	}
	body := mustJSON(map[string]any{
		"controller": mc.ctrl,
		"parent":     parent,
		"children":   observed,
		"related":    related,
		"finalizing": finalizing,
	})
	url := mc.cfg.SyncURL
	if finalizing {
		url = mc.cfg.FinalizeURL
	}
	mc.count(key, func(m *Metrics) {
		if finalizing {
			m.Finalizes++
		} else {
			m.Syncs++
		}
	})
	resp, err := mc.call(ctx, key, url, body, finalizing)
	if err != nil {
		var ra retryAfterError
		if !errors.As(err, &ra) {
			mc.count(key, func(m *Metrics) { m.HookErrors++ })
		}
		return err
	}
	if resp.ResyncAfterSeconds > 0 {
		w.requeueAfter(time.Duration(resp.ResyncAfterSeconds * float64(time.Second)))
	}
	desired, err := mc.desiredChildren(parent, resp.Children)
	if err != nil {
		mc.count(key, func(m *Metrics) { m.HookErrors++ })
		return err
	}
	manageErr := mc.manageChildren(key, parent, observed, desired)
	mc.mu.Lock()
	drop := mc.dropStatus[key]
	mc.mu.Unlock()
	if drop {
		mc.count(key, func(m *Metrics) { m.StatusDropped++ })
		return manageErr
	}
	status := resp.Status
	if status == nil {
		status = map[string]any{}
	}
	gen, _ := nestedInt(parent, "metadata", "generation")
	status["observedGeneration"] = gen
	// As Metacontroller's AtomicStatusUpdate: by UID, over whatever status
	// the parent has now, even when the hook computed this one from an
	// older parent (ParentCacheLag).
	changed, err := mc.api.UpdateStatus(w.ref, uid, status)
	if err != nil {
		return errors.Join(manageErr, fmt.Errorf("update parent status: %w", err))
	}
	if changed {
		mc.count(key, func(m *Metrics) { m.StatusUpdates++ })
	}
	if finalizing && resp.Finalized {
		_, err := mc.api.Mutate(w.ref, func(o Object) error {
			if nestedString(o, "metadata", "uid") != uid {
				return ErrConflict
			}
			setFinalizers(o, removeString(finalizersOf(o), fin))
			return nil
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return errors.Join(manageErr, fmt.Errorf("remove finalizer: %w", err))
		}
	}
	return manageErr
}

// call POSTs one hook request. Only a 200 with a JSON body is a success.
func (mc *Metacontroller) call(ctx context.Context, key, url string, body []byte, finalizing bool) (*hookResponse, error) {
	rec := SyncRecord{Parent: key, Finalizing: finalizing, Start: time.Now(), Request: body}
	defer func() {
		rec.Duration = time.Since(rec.Start)
		mc.record(rec)
	}()
	ctx, cancel := context.WithTimeout(ctx, mc.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		rec.Err = err
		return nil, fmt.Errorf("hook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := mc.syncClient
	if finalizing {
		client = mc.finalizeClient
	}
	resp, err := client.Do(req)
	if err != nil {
		rec.Err = err
		return nil, fmt.Errorf("hook %s: %w", url, err)
	}
	defer resp.Body.Close()
	rec.HTTPStatus = resp.StatusCode
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	rec.Response = data
	if err != nil {
		rec.Err = err
		return nil, fmt.Errorf("hook %s: read answer: %w", url, err)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
			rec.Err = retryAfterError{time.Duration(secs) * time.Second}
			return nil, rec.Err
		}
	}
	if resp.StatusCode != http.StatusOK {
		rec.Err = fmt.Errorf("hook %s: HTTP %d: %s", url, resp.StatusCode, bytes.TrimSpace(data))
		return nil, rec.Err
	}
	var out hookResponse
	if err := json.Unmarshal(data, &out); err != nil {
		rec.Err = fmt.Errorf("hook %s: decode answer: %w", url, err)
		return nil, rec.Err
	}
	rec.ResyncAfter, rec.Finalized = out.ResyncAfterSeconds, out.Finalized
	return &out, nil
}

// observedChildren builds the request's children map: every declared type,
// even when empty, then name -> object for the children this parent controls.
func (mc *Metacontroller) observedChildren(parent Object) map[string]map[string]Object {
	uid := nestedString(parent, "metadata", "uid")
	ns := nestedString(parent, "metadata", "namespace")
	mc.mu.Lock()
	hidden := mc.hideChildren[ns+"/"+nestedString(parent, "metadata", "name")]
	mc.mu.Unlock()
	out := map[string]map[string]Object{}
	for _, t := range mc.cfg.ChildTypes {
		m := map[string]Object{}
		if hidden {
			out[t.Key()] = m
			continue
		}
		for _, obj := range mc.api.List(t.Key(), ns) {
			if controllerOwnerUID(obj) == uid {
				m[nestedString(obj, "metadata", "name")] = obj
			}
		}
		out[t.Key()] = m
	}
	return out
}

// desiredChildren validates the hook's children and adds what Metacontroller
// adds: the namespace, the controller-uid label and the last-applied
// annotation. Any invalid child fails the whole answer: nothing is applied.
func (mc *Metacontroller) desiredChildren(parent Object, children []map[string]any) (map[string]map[string]Object, error) {
	uid := nestedString(parent, "metadata", "uid")
	ns := nestedString(parent, "metadata", "namespace")
	out := map[string]map[string]Object{}
	for i, c := range children {
		obj, err := normalize(c)
		if err != nil {
			return nil, fmt.Errorf("child %d: %w", i, err)
		}
		typ := TypeKey(obj)
		if _, ok := mc.types[typ]; !ok {
			return nil, fmt.Errorf("child %d: type %q is not among the controller's childResources", i, typ)
		}
		name := nestedString(obj, "metadata", "name")
		if name == "" {
			return nil, fmt.Errorf("child %d (%s): metadata.name is required", i, typ)
		}
		md := ensureMap(obj, "metadata")
		if cns, ok := md["namespace"].(string); ok && cns != "" && cns != ns {
			return nil, fmt.Errorf("child %s %s: namespace %q differs from the parent's %q", typ, name, cns, ns)
		}
		md["namespace"] = ns
		labels := ensureMap(obj, "metadata", "labels")
		if v, ok := labels[LabelControllerUID]; !ok {
			labels[LabelControllerUID] = uid
		} else if v != uid {
			return nil, fmt.Errorf("labels on desired child %s %s/%s don't match parent selector", typ, ns, name)
		}
		if ann := nestedMap(obj, "metadata", "annotations"); ann != nil {
			delete(ann, AnnotationLastApplied)
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
		last := string(mustJSON(obj))
		ensureMap(obj, "metadata", "annotations")[AnnotationLastApplied] = last
		if out[typ] == nil {
			out[typ] = map[string]Object{}
		}
		out[typ][name] = obj
	}
	return out, nil
}

// manageChildren deletes the observed children the hook left out, then
// creates or updates the desired ones. Failures are recorded and returned
// together; the other children are still applied.
func (mc *Metacontroller) manageChildren(key string, parent Object, observed, desired map[string]map[string]Object) error {
	var errs []error
	uid := nestedString(parent, "metadata", "uid")
	for _, t := range mc.cfg.ChildTypes {
		typ := t.Key()
		for _, name := range sortedKeys(observed[typ]) {
			obj := observed[typ][name]
			if _, keep := desired[typ][name]; keep || isTerminating(obj) {
				continue
			}
			ref := RefOf(obj)
			if err := mc.api.Delete(ref, nestedString(obj, "metadata", "uid")); err != nil && !errors.Is(err, ErrNotFound) {
				mc.applyError(key, ref, "delete", err)
				errs = append(errs, err)
				continue
			}
			mc.count(key, func(m *Metrics) { m.ChildDeletes++ })
		}
	}
	for _, typ := range mc.applyOrder() {
		t := mc.types[typ]
		for _, name := range sortedKeys(desired[typ]) {
			want := desired[typ][name]
			ref := RefOf(want)
			cur, exists := observed[typ][name]
			if !exists {
				if _, taken := mc.api.Get(ref); taken {
					err := fmt.Errorf("%s already exists and is not controlled by this parent: %w", ref, ErrAlreadyExists)
					mc.applyError(key, ref, "create", err)
					errs = append(errs, err)
					continue
				}
				obj := copyObject(want)
				md := ensureMap(obj, "metadata")
				owners, _ := md["ownerReferences"].([]any)
				md["ownerReferences"] = append(owners, map[string]any{
					"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": mc.cfg.ParentKind,
					"name": nestedString(parent, "metadata", "name"), "uid": uid,
					"controller": true, "blockOwnerDeletion": true,
				})
				if _, err := mc.api.Create(obj); err != nil {
					mc.applyError(key, ref, "create", err)
					errs = append(errs, err)
					continue
				}
				mc.count(key, func(m *Metrics) { m.ChildCreates++ })
				continue
			}
			if isTerminating(cur) {
				continue // recreated by a later sync once it is gone
			}
			var last Object
			if s := nestedString(cur, "metadata", "annotations", AnnotationLastApplied); s != "" {
				_ = json.Unmarshal([]byte(s), &last)
			}
			merged := applyMerge(cur, last, want)
			if reflect.DeepEqual(merged, cur) {
				continue
			}
			switch t.UpdateMethod {
			case "InPlace":
				_, changed, err := mc.api.Update(merged)
				if err != nil {
					mc.applyError(key, ref, "update", err)
					errs = append(errs, err)
					continue
				}
				if changed {
					mc.count(key, func(m *Metrics) { m.ChildUpdates++ })
				}
			case "Recreate":
				if err := mc.api.Delete(ref, nestedString(cur, "metadata", "uid")); err != nil && !errors.Is(err, ErrNotFound) {
					mc.applyError(key, ref, "delete", err)
					errs = append(errs, err)
					continue
				}
				mc.count(key, func(m *Metrics) { m.ChildDeletes++ })
			default: // OnDelete: existing children are left alone
			}
		}
	}
	return errors.Join(errs...)
}

// CreateParent creates a parent of the controller's kind with the given spec.
func (mc *Metacontroller) CreateParent(namespace, name string, spec map[string]any) (Object, error) {
	return mc.api.Create(Object{
		"apiVersion": "etcd.database.coreos.com/v1beta2",
		"kind":       mc.cfg.ParentKind,
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec":       spec,
	})
}

func (mc *Metacontroller) parentRef(namespace, name string) Ref {
	return Ref{Type: mc.cfg.ParentType, Namespace: namespace, Name: name}
}

// Parent returns the current parent object.
func (mc *Metacontroller) Parent(namespace, name string) (Object, bool) {
	return mc.api.Get(mc.parentRef(namespace, name))
}

// UpdateParentSpec edits the spec in place (generation is bumped if it changed).
func (mc *Metacontroller) UpdateParentSpec(namespace, name string, edit func(spec map[string]any)) (Object, error) {
	return mc.api.Mutate(mc.parentRef(namespace, name), func(o Object) error {
		edit(ensureMap(o, "spec"))
		return nil
	})
}

// MergePatchParentSpec applies a JSON merge patch (RFC 7386) to the spec, like
// kubectl patch --type=merge -p '{"spec": ...}'.
func (mc *Metacontroller) MergePatchParentSpec(namespace, name string, patch map[string]any) (Object, error) {
	return mc.UpdateParentSpec(namespace, name, func(spec map[string]any) { mergePatch(spec, patch) })
}

func mergePatch(dst, patch map[string]any) {
	for k, v := range patch {
		if v == nil {
			delete(dst, k)
			continue
		}
		if pm, ok := v.(map[string]any); ok {
			dm, ok := dst[k].(map[string]any)
			if !ok {
				dm = map[string]any{}
				dst[k] = dm
			}
			mergePatch(dm, pm)
			continue
		}
		dst[k] = deepCopyJSON(v)
	}
}

// DeleteParent deletes the parent as kubectl delete would: with the
// controller's finalizer present this only sets deletionTimestamp, and the
// finalize hook is called until it answers finalized: true.
func (mc *Metacontroller) DeleteParent(namespace, name string) error {
	return mc.api.Delete(mc.parentRef(namespace, name), "")
}

// Children returns the parent's children as the next request would show them.
func (mc *Metacontroller) Children(namespace, name string) (map[string]map[string]Object, error) {
	p, ok := mc.Parent(namespace, name)
	if !ok {
		return nil, fmt.Errorf("parent %s/%s: %w", namespace, name, ErrNotFound)
	}
	return mc.observedChildren(p), nil
}

// DropStatusWrites makes every later sync of the parent apply the hook's
// children but not write its status, until called with false: what a
// Metacontroller that dies (or loses a conflict) between the two does.
func (mc *Metacontroller) DropStatusWrites(namespace, name string, drop bool) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.dropStatus == nil {
		mc.dropStatus = map[string]bool{}
	}
	mc.dropStatus[namespace+"/"+name] = drop
}

// HideChildren makes every later request of the parent show no child at
// all, until called with false: what an informer cache that has not caught
// up shows. Creating a child that exists then fails, as it would.
func (mc *Metacontroller) HideChildren(namespace, name string, hide bool) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.hideChildren == nil {
		mc.hideChildren = map[string]bool{}
	}
	mc.hideChildren[namespace+"/"+name] = hide
}

// applyOrder is the order of child types in which manageChildren creates
// and updates: ApplyOrder first, then the rest of ChildTypes.
func (mc *Metacontroller) applyOrder() []string {
	order := slices.Clone(mc.cfg.ApplyOrder)
	for _, t := range mc.cfg.ChildTypes {
		if !slices.Contains(order, t.Key()) {
			order = append(order, t.Key())
		}
	}
	return order
}

// SetParentCacheLag sets ControllerConfig.ParentCacheLag from now on; 0
// turns it off. See cachedParent.
func (mc *Metacontroller) SetParentCacheLag(lag time.Duration) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.parentLag = lag
}

// parentVersion is one version of a parent as the watch delivered it.
type parentVersion struct {
	seen time.Time
	rv   int64
	obj  Object
}

// observeParent keeps a version of a parent for cachedParent. A version
// of another UID (the parent deleted and created again) replaces them
// all; one not newer than the newest kept (an event delivered late) is
// left out.
func (mc *Metacontroller) observeParent(obj Object) {
	key := parentKey(RefOf(obj))
	rv, err := strconv.ParseInt(nestedString(obj, "metadata", "resourceVersion"), 10, 64)
	if err != nil {
		return
	}
	uid := nestedString(obj, "metadata", "uid")
	mc.mu.Lock()
	defer mc.mu.Unlock()
	vs := mc.parentVersions[key]
	if len(vs) > 0 && nestedString(vs[0].obj, "metadata", "uid") != uid {
		vs = nil
	}
	if n := len(vs); n > 0 && vs[n-1].rv >= rv {
		return
	}
	now := mc.now()
	vs = append(vs, parentVersion{seen: now, rv: rv, obj: copyObject(obj)})
	// Only the newest version old enough to be served, and the newer
	// ones, can be served again.
	for len(vs) > 1 && !vs[1].seen.After(now.Add(-mc.parentLag)) {
		vs = vs[1:]
	}
	mc.parentVersions[key] = vs
}

func (mc *Metacontroller) forgetParent(ref Ref) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	delete(mc.parentVersions, parentKey(ref))
}

// cachedParent is the parent a sync is served, given fresh, the parent as
// the API server has it now. Without ParentCacheLag that is fresh itself.
//
// With it, it is what Metacontroller's informer cache could hold: the
// newest version seen at least ParentCacheLag ago, or, when every version
// is younger, the oldest one kept, never one from before the parent (this
// UID) existed. Metacontroller (v4.17.2 as any other) syncs a parent from
// its informer cache, which need not hold yet the status the previous
// sync wrote; and its status write, AtomicStatusUpdate, answers a
// conflict by reading the object again and writing the same status it
// computed, so a status computed from a stale parent replaces a newer
// one. A hook that carries state from status to status (a phase that
// moves on) can thus see, and write back, a state it already left: that
// left an EtcdRestore Verifying for good although the restore was done.
// syncParent writes the status by UID as AtomicStatusUpdate does, so
// serving the stale parent is all the emulation needs. Children (and
// related objects) are still read fresh. The lag is fixed rather than
// random so that a scenario gets the same window every run.
func (mc *Metacontroller) cachedParent(fresh Object) Object {
	mc.observeParent(fresh)
	key := parentKey(RefOf(fresh))
	mc.mu.Lock()
	defer mc.mu.Unlock()
	vs := mc.parentVersions[key]
	if mc.parentLag <= 0 || len(vs) == 0 || nestedString(vs[0].obj, "metadata", "uid") != nestedString(fresh, "metadata", "uid") {
		return fresh
	}
	cutoff := mc.now().Add(-mc.parentLag)
	served := vs[0]
	for _, v := range vs[1:] {
		if v.seen.After(cutoff) {
			break
		}
		served = v
	}
	return copyObject(served.obj)
}

// AnnotateParent sets (or, with value "", removes) an annotation on the
// parent, as kubectl annotate would.
func (mc *Metacontroller) AnnotateParent(namespace, name, key, value string) (Object, error) {
	return mc.api.Mutate(mc.parentRef(namespace, name), func(o Object) error {
		md := ensureMap(o, "metadata")
		annotations, _ := md["annotations"].(map[string]any)
		if annotations == nil {
			annotations = map[string]any{}
		}
		if value == "" {
			delete(annotations, key)
		} else {
			annotations[key] = value
		}
		md["annotations"] = annotations
		return nil
	})
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
