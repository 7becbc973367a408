package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
		{APIVersion: "v1", Kind: "PersistentVolumeClaim", Resource: "persistentvolumeclaims", UpdateMethod: "InPlace"},
		{APIVersion: "policy/v1", Kind: "PodDisruptionBudget", Resource: "poddisruptionbudgets", UpdateMethod: "InPlace"},
		{APIVersion: "v1", Kind: "Secret", Resource: "secrets", UpdateMethod: "InPlace"},
		{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Resource: "networkpolicies", UpdateMethod: "InPlace"},
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
	// relatedTypes are the type keys customize answers have named;
	// relatedBy the ones the last answer for each parent named, by
	// namespace/name.
	relatedTypes map[string]bool
	relatedBy    map[string]map[string]bool
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
// up shows. Nothing is claimed meanwhile, and creating a child that exists
// is answered AlreadyExists, which Metacontroller logs and skips
// (Metrics.ChildCreatesExisting).
func (mc *Metacontroller) HideChildren(namespace, name string, hide bool) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.hideChildren == nil {
		mc.hideChildren = map[string]bool{}
	}
	mc.hideChildren[namespace+"/"+name] = hide
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
