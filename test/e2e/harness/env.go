package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// Options configures an Env. The zero value runs bin/etcd-hook.
type Options struct {
	// HookURL points Metacontroller at a hook that is already running (a
	// fake in a test) instead of starting the binary.
	HookURL    string
	HookBinary string   // [<root>/bin/etcd-hook]
	HookArgs   []string // after --addr 127.0.0.1:<port>
	HookEnv    []string
	// HookReplicas runs that many hook processes (default 1), each with
	// --peers listing all of them, behind a Service (service.go), as the
	// chart deploys them.
	HookReplicas int

	Controller ControllerConfig // SyncURL and FinalizeURL are filled in
	Kubelet    KubeletConfig    // Dir is filled in
	// Volumes tunes the resizing of claims (VolumeController).
	Volumes VolumeConfig

	// Backups runs a second Metacontroller, for EtcdBackups and their run
	// Pods, with the hook's customize hook (BackupMC).
	Backups bool
	// Restores runs a third Metacontroller, for EtcdRestores (RestoreMC),
	// with the hook's customize hook.
	Restores bool
	// ClusterCustomize gives the EtcdCluster controller the hook's
	// customize hook (/customize), which relates the EtcdRestore named
	// after a cluster and the EtcdBackups of its namespace.
	ClusterCustomize bool

	// StrictDNS resolves Pod names only through a matching headless
	// Service, as Kubernetes does (see clusterDNS).
	StrictDNS bool
	// Lifetime bounds everything the Env runs [the test deadline, at most 14m].
	Lifetime time.Duration
	// TolerateApplyErrors stops Close from failing the test on child
	// operations the API server refused that the test did not take with
	// MC.TakeApplyErrors.
	TolerateApplyErrors bool
	// Verbose logs kubelet and Metacontroller events as they happen
	// (also on with ETCDHOOK_E2E_VERBOSE=1). They are printed on failure anyway.
	Verbose bool
}

// Env is one emulated cluster: API server, Metacontroller, kubelet, cluster
// DNS, the hook and a fault proxy in front of it.
type Env struct {
	T   testing.TB
	Dir string
	API *APIServer
	MC  *Metacontroller
	// BackupMC runs the EtcdBackup controller, with Options.Backups.
	BackupMC *Metacontroller
	// RestoreMC runs the EtcdRestore controller, with Options.Restores.
	RestoreMC *Metacontroller
	Kubelet   *Kubelet
	Volumes   *VolumeController // grows the volumes of claims whose request was raised
	Proxy     *FaultProxy
	Hook      *HookProcess // nil when Options.HookURL is used; the first of Hooks
	// Hooks are the hook's replicas (Options.HookReplicas), and Service
	// the Service in front of them when there are several.
	Hooks   []*HookProcess
	Service *Service
	Procs   *ProcTable

	ctx       context.Context
	cancel    context.CancelFunc
	dnsRemove func()
	opts      Options
	// ownHook: the hook is this tree's build, not Options.HookBinary.
	ownHook   bool
	closeOnce sync.Once
	closed    atomic.Bool
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// New builds and starts an Env; it is closed by t.Cleanup. The test is
// skipped (failed with CI=true) when the sandbox is not available.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	Require(t)
	ownHook := opts.HookBinary == ""
	if opts.HookURL == "" {
		if ownHook {
			opts.HookBinary = testenv.Binary(t, testenv.Hook)
		} else if err := testenv.Executable(opts.HookBinary); err != nil {
			testenv.SkipOrFail(t, "%v; run %q from the repository root", err, testenv.BuildHint(testenv.Hook))
		}
	}
	e := &Env{T: t, API: NewAPIServer(), Procs: NewProcTable(), opts: opts, ownHook: ownHook}
	dir, err := testDir(t)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	e.Dir = dir
	lifetime := opts.Lifetime
	if lifetime == 0 {
		lifetime = 14 * time.Minute
		if dl, ok := deadline(t); ok && time.Until(dl) < lifetime {
			lifetime = time.Until(dl)
		}
	}
	e.ctx, e.cancel = context.WithTimeout(context.Background(), lifetime)
	t.Cleanup(e.Close)
	if err := e.start(); err != nil {
		t.Fatalf("harness: %v", err)
	}
	return e
}

func deadline(t testing.TB) (time.Time, bool) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		return d.Deadline()
	}
	return time.Time{}, false
}

// testDir is a temp dir, or a kept directory under ETCDHOOK_E2E_ARTIFACTS
// (e.g. test/e2e/artifacts, ignored by git) for CI to collect.
func testDir(t testing.TB) (string, error) {
	base := os.Getenv("ETCDHOOK_E2E_ARTIFACTS")
	if base == "" {
		return t.TempDir(), nil
	}
	d := filepath.Join(base, unsafeName.ReplaceAllString(t.Name(), "_"))
	if err := os.RemoveAll(d); err != nil {
		return "", fmt.Errorf("artifacts dir: %w", err)
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("artifacts dir: %w", err)
	}
	return d, nil
}

func (e *Env) logf(format string, args ...any) {
	if e.closed.Load() {
		return
	}
	e.T.Logf(format, args...)
}

func (e *Env) start() error {
	verbose := e.opts.Verbose || os.Getenv("ETCDHOOK_E2E_VERBOSE") == "1"
	if dns := SandboxDNS(); dns != nil {
		removeA := dns.AddSource(clusterDNS(e.API, e.opts.StrictDNS))
		removePTR := dns.AddPTRSource(clusterPTR(e.API, e.opts.StrictDNS))
		e.dnsRemove = func() { removeA(); removePTR() }
	}
	if err := os.MkdirAll(filepath.Join(e.Dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("logs dir: %w", err)
	}
	hookURL := e.opts.HookURL
	if hookURL == "" {
		var err error
		if hookURL, err = e.startHooks(max(1, e.opts.HookReplicas)); err != nil {
			return err
		}
	}
	proxy, err := StartFaultProxy(hookURL)
	if err != nil {
		return err
	}
	e.Proxy = proxy
	cc := e.opts.Controller
	cc.SyncURL, cc.FinalizeURL = proxy.URL()+"/sync", proxy.URL()+"/finalize"
	if e.opts.ClusterCustomize {
		cc.CustomizeURL = proxy.URL() + "/customize"
	}
	if verbose && cc.Logf == nil {
		cc.Logf = e.logf
	}
	mc, err := NewMetacontroller(e.API, cc)
	if err != nil {
		return err
	}
	e.MC = mc
	if e.opts.Backups {
		bc := ControllerConfig{
			Name: "etcd-backup", ParentType: TypeEtcdBackup, ParentKind: "EtcdBackup", ParentResource: "etcdbackups",
			SyncURL: proxy.URL() + "/backup/sync", FinalizeURL: proxy.URL() + "/backup/finalize", CustomizeURL: proxy.URL() + "/backup/customize",
			ChildTypes:   []ChildType{{APIVersion: "v1", Kind: "Pod", Resource: "pods", UpdateMethod: "OnDelete"}},
			ResyncPeriod: 300 * time.Second,
			Logf:         cc.Logf,
		}
		if e.BackupMC, err = NewMetacontroller(e.API, bc); err != nil {
			return err
		}
	}
	if e.opts.Restores {
		// An EtcdRestore has no children; the emulator needs a declared
		// type, and the hook answers none.
		rc := ControllerConfig{
			Name: "etcd-restore", ParentType: TypeEtcdRestore, ParentKind: "EtcdRestore", ParentResource: "etcdrestores",
			SyncURL: proxy.URL() + "/restore/sync", FinalizeURL: proxy.URL() + "/restore/finalize", CustomizeURL: proxy.URL() + "/restore/customize",
			ChildTypes:   []ChildType{{APIVersion: "v1", Kind: "Pod", Resource: "pods", UpdateMethod: "OnDelete"}},
			ResyncPeriod: 60 * time.Second,
			Logf:         cc.Logf,
		}
		if e.RestoreMC, err = NewMetacontroller(e.API, rc); err != nil {
			return err
		}
	}
	kc := e.opts.Kubelet
	kc.Dir = filepath.Join(e.Dir, "cluster")
	if verbose && kc.Logf == nil {
		kc.Logf = e.logf
	}
	k, err := NewKubelet(e.API, e.Procs, NewIPAllocator(), kc)
	if err != nil {
		return err
	}
	e.Kubelet = k
	vc := e.opts.Volumes
	if verbose && vc.Logf == nil {
		vc.Logf = e.logf
	}
	e.Volumes = NewVolumeController(e.API, vc)
	e.Volumes.Start(e.ctx)
	k.Start(e.ctx)
	mc.Start(e.ctx)
	if e.BackupMC != nil {
		e.BackupMC.Start(e.ctx)
	}
	if e.RestoreMC != nil {
		e.RestoreMC.Start(e.ctx)
	}
	return nil
}

// Close stops everything the Env started, in dependency order, and checks
// that no process survived. On failure it prints what helps debugging.
func (e *Env) Close() {
	e.closeOnce.Do(e.close)
}

func (e *Env) close() {
	t := e.T
	if e.MC != nil {
		e.MC.Stop()
	}
	if e.BackupMC != nil {
		e.BackupMC.Stop()
	}
	if e.Volumes != nil {
		e.Volumes.Stop()
	}
	for _, h := range e.Hooks {
		h.Stop(2 * time.Second)
	}
	if e.Service != nil {
		_ = e.Service.Close()
	}
	if e.Kubelet != nil {
		e.Kubelet.Stop(2 * time.Second)
	}
	e.Procs.StopAll(time.Second)
	if e.Proxy != nil {
		_ = e.Proxy.Close()
	}
	if e.dnsRemove != nil {
		e.dnsRemove()
	}
	e.cancel()
	if live := e.Procs.Live(); len(live) > 0 {
		t.Errorf("harness: %d processes still running after Close", len(live))
	}
	if e.MC != nil && !e.opts.TolerateApplyErrors {
		errs := e.MC.untakenApplyErrors()
		if e.BackupMC != nil {
			errs = append(errs, e.BackupMC.untakenApplyErrors()...)
		}
		if len(errs) > 0 {
			var b strings.Builder
			for _, ae := range errs {
				fmt.Fprintf(&b, "\n  %v", ae)
			}
			t.Errorf("harness: the API server refused %d child operations (take expected ones with MC.TakeApplyErrors):%s", len(errs), b.String())
		}
	}
	if t.Failed() {
		e.dump()
	}
	e.closed.Store(true)
}

// dump prints the last hook exchanges, kubelet events and log tails.
func (e *Env) dump() {
	t := e.T
	var b strings.Builder
	for _, mc := range []*Metacontroller{e.MC, e.BackupMC} {
		if mc == nil {
			continue
		}
		recs := mc.Records("", "")
		if len(recs) > 40 {
			recs = recs[len(recs)-40:]
		}
		fmt.Fprintf(&b, "=== last hook exchanges of %s\n", mc.cfg.Name)
		for _, r := range recs {
			b.WriteString(describeRecord(r) + "\n")
		}
		fmt.Fprintf(&b, "=== metrics of %s: %+v\n", mc.cfg.Name, mc.Metrics("", ""))
	}
	if e.Kubelet != nil {
		ev := e.Kubelet.Events()
		if len(ev) > 80 {
			ev = ev[len(ev)-80:]
		}
		b.WriteString("=== kubelet events\n" + strings.Join(ev, "\n") + "\n")
	}
	if e.Volumes != nil {
		if ev := e.Volumes.Events(); len(ev) > 0 {
			if len(ev) > 40 {
				ev = ev[len(ev)-40:]
			}
			b.WriteString("=== volume resize events\n" + strings.Join(ev, "\n") + "\n")
		}
	}
	var logs []string
	_ = filepath.WalkDir(e.Dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".log") && strings.Contains(p, string(filepath.Separator)+"logs"+string(filepath.Separator)) {
			logs = append(logs, p)
		}
		return nil
	})
	sort.Strings(logs)
	for _, p := range logs {
		tail, err := testenv.TailFile(p, 40)
		if err != nil {
			tail = err.Error()
		}
		fmt.Fprintf(&b, "=== tail of %s\n%s\n", p, tail)
	}
	t.Log("\n" + b.String())
}

// Ctx is cancelled when the Env closes or its lifetime ends.
func (e *Env) Ctx() context.Context { return e.ctx }

// WaitFor polls cond every 50 ms until it holds, the timeout passes or the
// Env ends. cond's string explains the current state for the error.
func (e *Env) WaitFor(timeout time.Duration, what string, cond func() (bool, string)) error {
	ctx, cancel := context.WithTimeout(e.ctx, timeout)
	defer cancel()
	last := ""
	for {
		ok, detail := cond()
		if ok {
			return nil
		}
		last = detail
		if !sleepCtx(ctx, 50*time.Millisecond) {
			if e.ctx.Err() != nil {
				// Not this wait's timeout: the harness's whole lifetime
				// (Options.Lifetime) is over, and every process with it.
				return fmt.Errorf("waiting %s for %s: the harness's lifetime ended (Options.Lifetime): %w (last: %s)", timeout, what, e.ctx.Err(), last)
			}
			return fmt.Errorf("waiting %s for %s: %w (last: %s)", timeout, what, ctx.Err(), last)
		}
	}
}

// Pod returns a Pod.
func (e *Env) Pod(namespace, name string) (Object, bool) {
	return e.API.Get(Ref{Type: TypePod, Namespace: namespace, Name: name})
}

// DeletePod deletes a Pod as a user would (graceful).
func (e *Env) DeletePod(namespace, name string) error {
	return e.API.Delete(Ref{Type: TypePod, Namespace: namespace, Name: name}, "")
}

// IsPodReady reads the Pod's Ready condition.
func IsPodReady(pod Object) bool { return podReady(pod) }

// PodSummary is a one-line view of a Pod for error messages.
func PodSummary(pod Object) string {
	if pod == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s phase=%s ip=%s ready=%v", nestedString(pod, "metadata", "name"),
		nestedString(pod, "status", "phase"), nestedString(pod, "status", "podIP"), podReady(pod))
	if isTerminating(pod) {
		b.WriteString(" terminating")
	}
	cs, _ := nested(pod, "status", "containerStatuses")
	list, _ := cs.([]any)
	for _, c := range list {
		state := nestedMap(c, "state")
		for _, k := range sortedKeys(state) {
			fmt.Fprintf(&b, " [%s %s %s restarts=%v]", nestedString(c, "name"), k, nestedString(state, k, "reason"), nestedMapValue(c, "restartCount"))
		}
	}
	return b.String()
}

func nestedMapValue(obj any, path ...string) any {
	v, _ := nested(obj, path...)
	return v
}

// WaitPodReady waits until the Pod exists and is Ready.
func (e *Env) WaitPodReady(namespace, name string, timeout time.Duration) (Object, error) {
	var pod Object
	err := e.WaitFor(timeout, "pod "+namespace+"/"+name+" Ready", func() (bool, string) {
		p, ok := e.Pod(namespace, name)
		pod = p
		if !ok {
			return false, "pod does not exist"
		}
		return podReady(p) && !isTerminating(p), PodSummary(p)
	})
	return pod, err
}

// WaitPodGone waits until the Pod has left the store.
func (e *Env) WaitPodGone(namespace, name string, timeout time.Duration) error {
	return e.WaitFor(timeout, "pod "+namespace+"/"+name+" gone", func() (bool, string) {
		p, ok := e.Pod(namespace, name)
		return !ok, PodSummary(p)
	})
}

// DeleteParentAndWait deletes the parent and waits until the finalize hook
// has released it and it is gone.
func (e *Env) DeleteParentAndWait(namespace, name string, timeout time.Duration) error {
	if err := e.MC.DeleteParent(namespace, name); err != nil {
		return err
	}
	return e.WaitFor(timeout, "parent "+namespace+"/"+name+" gone", func() (bool, string) {
		p, ok := e.MC.Parent(namespace, name)
		return !ok, fmt.Sprintf("finalizers %v, status %v", finalizersOf(p), nestedMap(p, "status"))
	})
}

// Resolve looks a name up the way every process in the sandbox does.
func (e *Env) Resolve(ctx context.Context, host string) ([]string, error) {
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	sort.Strings(addrs)
	return addrs, nil
}

// hookArgs are Options.HookArgs, told how long this kubelet takes to bring
// an updated Secret into a Pod (a few of its refresh periods) unless they
// say otherwise: a real kubelet takes a minute or two, which is the hook's
// default. Only this tree's hook is told: Options.HookBinary may be an
// earlier release's, which has no such flag (an operator upgrade test).
// startHooks starts n hook processes (hook.log, or hook-<i>.log for
// several, each then with --peers) and returns the URL Metacontroller is
// to call: the one hook's, or the Service's in front of them.
func (e *Env) startHooks(n int) (string, error) {
	var peers, urls []string
	for i := range n {
		name := "hook.log"
		if n > 1 {
			name = fmt.Sprintf("hook-%d.log", i)
		}
		h, err := NewHookProcess(e.Procs, e.opts.HookBinary, filepath.Join(e.Dir, "logs", name), e.hookArgs(), e.opts.HookEnv)
		if err != nil {
			return "", err
		}
		e.Hooks = append(e.Hooks, h)
		peers, urls = append(peers, h.Addr()), append(urls, h.URL())
	}
	e.Hook = e.Hooks[0]
	for _, h := range e.Hooks {
		if n > 1 {
			h.Args = append(slices.Clone(h.Args), "--peers", strings.Join(peers, ","), "--peer-address", h.Addr())
		}
		if err := h.Start(e.ctx); err != nil {
			return "", err
		}
	}
	if n == 1 {
		return e.Hook.URL(), nil
	}
	svc, err := StartService(urls...)
	if err != nil {
		return "", err
	}
	e.Service = svc
	return svc.URL(), nil
}

func (e *Env) hookArgs() []string {
	if !e.ownHook {
		return e.opts.HookArgs
	}
	for _, a := range e.opts.HookArgs {
		if strings.HasPrefix(a, "--secret-propagation") {
			return e.opts.HookArgs
		}
	}
	refresh := e.opts.Kubelet.SecretRefreshPeriod
	if refresh <= 0 {
		refresh = time.Second
	}
	return append([]string{fmt.Sprintf("--secret-propagation=%s", 5*refresh)}, e.opts.HookArgs...)
}
