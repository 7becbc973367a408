package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
	"github.com/etcdhook/etcd-hook/reconcile"
)

type nopRecorder struct{}

func (nopRecorder) MembershipAction(membership.ActionType, string) {}

// rig is one measured setup: a real etcd cluster, the hook and the echo
// floor behind one HTTP server, and the steady-state request.
type rig struct {
	members int
	// tls is set when the members serve clients TLS and the request is of
	// a cluster with spec.TLS.
	tls     *clusterTLS
	server  *httptest.Server
	client  *http.Client
	request []byte
	dialer  *rigDialer
	// endpoints are the members' client URLs as the hook dials them.
	endpoints []string
	// etcd is what the hook reads of the cluster in a steady sync.
	etcd etcdclient.Cluster
}

// benchCluster and benchUID name the cluster of every rig.
const (
	benchCluster = "bench"
	benchUID     = "5d1b0c6e-2a3f-4b8e-9c7d-000000000001"
)

// newRig starts an etcd cluster of the given size and the hook in front of
// it. With withTLS the members serve clients TLS with client-certificate
// auth, as the member Pods of a cluster with spec.TLS do, and the request
// is that cluster's (see clusterRequestTLS).
func newRig(tb testing.TB, members int, withTLS bool) *rig {
	mode := rigPlain
	if withTLS {
		mode = rigStaticTLS
	}
	return newRigMode(tb, members, mode)
}

// rigMode is how the rig's members serve clients.
type rigMode int

const (
	rigPlain     rigMode = iota
	rigStaticTLS         // TLS from the Secrets the user issued (spec.TLS.static)
	rigAutoTLS           // TLS from the Secrets the hook issued (spec.TLS.auto)
)

func newRigMode(tb testing.TB, members int, mode rigMode) *rig {
	tb.Helper()
	opts := etcdtest.Options{Size: members}
	var ct *clusterTLS
	if mode != rigPlain {
		var err error
		issue := issueClusterTLS
		if mode == rigAutoTLS {
			issue = issueAutoClusterTLS
		}
		if ct, err = issue(benchCluster, fleetNamespace, benchUID, etcdtest.DefaultVersion); err != nil {
			tb.Fatal(err)
		}
		dir := tb.TempDir()
		for name, data := range ct.server {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				tb.Fatal(err)
			}
		}
		opts.ClientTLS = &etcdtest.ServerTLS{
			CertFile:      filepath.Join(dir, v1beta2.ServerCertKey),
			KeyFile:       filepath.Join(dir, v1beta2.ServerKeyKey),
			TrustedCAFile: filepath.Join(dir, v1beta2.ServerCAKey),
		}
	}
	ec := etcdtest.StartCluster(tb, opts)
	var names []string
	for _, m := range ec.Members {
		names = append(names, m.Name)
	}
	dialer := newRigDialer(ec)
	tb.Cleanup(dialer.close)
	reconciler := &reconcile.Reconciler{
		Dialer:   dialer,
		Recorder: nopRecorder{},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}

	// The steady state is what Metacontroller sends back once it has
	// applied the hook's answer: the status the hook wrote for the
	// converged cluster, and every member Pod last applied as the hook
	// answered it, with that answer's labels and annotations. The hook
	// answers such a request with every child kept as it is.
	request, err := clusterRequestTLS(benchCluster, benchUID, names, etcdtest.DefaultVersion, v1beta2.ClusterStatus{Phase: v1beta2.PhaseRunning}, ct)
	if err != nil {
		tb.Fatal(err)
	}
	var o *etcdcluster.Observed
	var d etcdcluster.Decision
	for round := 0; ; round++ {
		if o, err = hooks.Decode(request); err != nil {
			tb.Fatal(err)
		}
		if d, err = reconciler.Sync(context.Background(), o, nil); err != nil {
			tb.Fatal(err)
		}
		if d.Action != nil || d.Status.Phase != "Running" {
			tb.Fatalf("the benchmark cluster is not steady: action %v, phase %q, reason %q", d.Action, d.Status.Phase, d.Status.Reason)
		}
		if round > 0 && answerKeeps(o, d) {
			break
		}
		if round == 3 {
			tb.Fatalf("the hook's answer does not settle: %+v", d.Status)
		}
		if request, err = clusterRequestTLS(benchCluster, benchUID, names, etcdtest.DefaultVersion, d.Status, ct); err != nil {
			tb.Fatal(err)
		}
		if request, err = appliedAsAnswered(request, d); err != nil {
			tb.Fatal(err)
		}
	}

	if len(o.Services) != 2 || len(o.PDBs) != 1 {
		tb.Fatalf("the steady request carries %d Services and %d budgets, want the 2 and the 1 the hook answers", len(o.Services), len(o.PDBs))
	}

	var endpoints []string
	for _, name := range names {
		endpoints = append(endpoints, plan.AddressesOf(o.Cluster).ClientURL(name))
	}
	if mode != rigPlain && (dialer.creds() == nil || !strings.HasPrefix(endpoints[0], "https://")) {
		tb.Fatalf("the hook did not call the TLS cluster with its operator certificate at https URLs: %v", endpoints)
	}
	etcd, err := dialer.Cluster(endpoints, dialer.creds())
	if err != nil {
		tb.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/sync", hooks.SyncHandler(reconciler))
	mux.Handle("/echo", echoHandler(d))
	mux.Handle("/echo-read", readingEchoHandler(etcd, d))
	r := &rig{members: members, tls: ct, server: httptest.NewServer(mux), request: request, dialer: dialer, endpoints: endpoints, etcd: etcd}
	tb.Cleanup(r.server.Close)
	r.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	// The hook must answer the steady request with no membership step.
	out := r.post(tb, "/sync")
	if !bytes.Contains(out, []byte(`"reason":"Converged"`)) {
		tb.Fatalf("hook answer is not steady: %.400s", out)
	}
	return r
}

// rigDialer is etcdtest's Dialer on a pool that can be replaced by an empty
// one, whose first sync dials every member again: a hook that just started,
// or whose connections to the cluster were closed (the pool keeps a
// bounded number). It remembers the client certificate the hook called
// with, so that the rig's own reads share the hook's connections: the pool
// keeps a connection per endpoint with one certificate, and replaces it
// when called with another.
type rigDialer struct {
	byPod map[string]string

	mu        sync.Mutex
	pool      *etcdclient.Pool
	lastCreds *etcdclient.ClientTLS
}

func newRigDialer(ec *etcdtest.Cluster) *rigDialer {
	return &rigDialer{byPod: etcdtest.NewDialer(nil, ec).ByPod, pool: etcdclient.NewPool(0)}
}

// Cluster implements etcdclient.Dialer.
func (d *rigDialer) Cluster(endpoints []string, creds *etcdclient.ClientTLS) (etcdclient.Cluster, error) {
	d.mu.Lock()
	pool := d.pool
	if creds != nil {
		d.lastCreds = creds
	}
	d.mu.Unlock()
	return etcdtest.Dialer{Pool: pool, ByPod: d.byPod}.Cluster(endpoints, creds)
}

func (d *rigDialer) creds() *etcdclient.ClientTLS {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastCreds
}

// renew replaces the pool with an empty one and closes the old one's
// connections: parsed certificates and connections are gone.
func (d *rigDialer) renew() {
	d.mu.Lock()
	old := d.pool
	d.pool = etcdclient.NewPool(0)
	d.mu.Unlock()
	old.Close()
}

func (d *rigDialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pool.Close()
}

// echoHandler is the floor: the hook's transport, decoding into the same
// types, and the hook's own answer for this request encoded again, with no
// etcd and no planning.
func echoHandler(d etcdcluster.Decision) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, hooks.MaxBodyBytes))
		if err != nil {
			hooks.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		if _, err := hooks.Decode(body); err != nil {
			hooks.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		out, err := hooks.Encode(d, false)
		if err != nil {
			hooks.WriteError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
}

// readingEchoHandler is the floor that also reads etcd as a steady sync
// does, in the same request, on the hook's connections: the least any
// hook that must read the cluster can take. Timing the read and the floor
// apart and adding their medians understates it: the hook-cost table puts
// this floor at 1.07 to 1.14 times that sum (see BENCHMARKS.md).
func readingEchoHandler(etcd etcdclient.Cluster, d etcdcluster.Decision) http.Handler {
	echo := echoHandler(d)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := etcd.Membership(r.Context()); err != nil {
			hooks.WriteError(w, http.StatusBadGateway, err.Error())
			return
		}
		echo.ServeHTTP(w, r)
	})
}

func (r *rig) post(tb testing.TB, path string) []byte {
	resp, err := r.client.Post(r.server.URL+path, "application/json", bytes.NewReader(r.request))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("%s: HTTP %d %v: %.300s", path, resp.StatusCode, err, out)
	}
	return out
}

// timedRead reads the cluster as a steady sync does, on its own.
func (r *rig) timedRead(tb testing.TB) time.Duration {
	start := time.Now()
	if _, err := r.etcd.Membership(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return time.Since(start)
}

// timed posts once and returns the round-trip time.
func (r *rig) timed(tb testing.TB, path string) time.Duration {
	start := time.Now()
	r.post(tb, path)
	return time.Since(start)
}

func (r *rig) String() string {
	return fmt.Sprintf("%d members (%s), %d-byte request", r.members, r.kind(), len(r.request))
}

// kind is "TLS" for a rig whose members serve clients TLS, else "plain".
func (r *rig) kind() string {
	switch {
	case r.tls != nil && r.tls.auto:
		return "auto TLS"
	case r.tls != nil:
		return "TLS"
	}
	return "plain"
}

// appliedAsAnswered gives each member Pod of a request the hook's answer
// for it as its last applied configuration, and that answer's labels and
// annotations, as Metacontroller records and applies an answer; and it
// adds the Services and the disruption budget of the answer as the API
// server serves them once applied (see servedChild): a steady request
// carries every child the hook answered, not only the Pods.
func appliedAsAnswered(request []byte, d etcdcluster.Decision) ([]byte, error) {
	answer, err := hooks.Encode(d, false)
	if err != nil {
		return nil, err
	}
	return applyAnswer(request, answer, true)
}

// podsAsAnswered is appliedAsAnswered of an answer as a hook process sent
// it, for the member Pods alone: the scale fleet's requests carry no
// Service, budget or NetworkPolicy (its sizing report says what they
// would add).
func podsAsAnswered(request, answer []byte) ([]byte, error) {
	return applyAnswer(request, answer, false)
}

// applyAnswer gives the request's member Pods the answer's, and with
// served its Services, budget and NetworkPolicies.
func applyAnswer(request, answer []byte, served bool) ([]byte, error) {
	var resp struct {
		Children []json.RawMessage `json:"children"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, err
	}
	var req map[string]any
	if err := json.Unmarshal(request, &req); err != nil {
		return nil, err
	}
	children := req["children"].(map[string]any)
	pods, _ := children[hooks.ChildPods].(map[string]any)
	parent := req["parent"].(map[string]any)["metadata"].(map[string]any)
	for _, raw := range resp.Children {
		var child struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name        string            `json:"name"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &child); err != nil {
			return nil, err
		}
		if key := map[string]string{plan.KindService: hooks.ChildServices, plan.KindPDB: hooks.ChildPDBs, plan.KindNetworkPolicy: hooks.ChildNetworkPolicies}[child.Kind]; key != "" && served {
			served, err := servedChild(raw, parent["name"].(string), parent["uid"].(string), len(pods))
			if err != nil {
				return nil, err
			}
			children[key].(map[string]any)[child.Metadata.Name] = served
			continue
		}
		pod, ok := pods[child.Metadata.Name].(map[string]any)
		if child.Kind != plan.KindPod || !ok {
			continue
		}
		annotations := map[string]any{plan.LastAppliedAnnotation: string(raw)}
		for k, v := range child.Metadata.Annotations {
			annotations[k] = v
		}
		meta := pod["metadata"].(map[string]any)
		meta["labels"], meta["annotations"] = child.Metadata.Labels, annotations
	}
	return json.Marshal(req)
}

// answerKeeps: the decision keeps every member Pod exactly as last
// applied and writes the status the request carries.
func answerKeeps(o *etcdcluster.Observed, d etcdcluster.Decision) bool {
	for _, c := range d.Children {
		if _, kept := c.Object.(json.RawMessage); c.Kind == plan.KindPod && !kept {
			return false
		}
	}
	return reflect.DeepEqual(o.Cluster.Status, d.Status)
}

// servedChild is a Service or PodDisruptionBudget of the hook's answer as
// the API server serves it back once Metacontroller has applied it, in the
// shape of the captured requests: the answer as last applied, the owner
// reference, the server's metadata and managedFields, the defaulted spec
// fields and the status.
func servedChild(raw json.RawMessage, cluster, clusterUID string, pods int) (map[string]any, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	meta := obj["metadata"].(map[string]any)
	name, kind := meta["name"].(string), obj["kind"].(string)
	annotations, _ := meta["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
	}
	annotations[plan.LastAppliedAnnotation] = string(raw)
	meta["annotations"] = annotations
	meta["uid"] = podUID(clusterUID, kind+"/"+name)
	meta["resourceVersion"] = "1042"
	meta["creationTimestamp"] = "2026-11-22T04:18:44Z"
	meta["ownerReferences"] = []any{map[string]any{
		"apiVersion": v1beta2.APIVersion, "kind": v1beta2.Kind, "name": cluster, "uid": clusterUID,
		"controller": true, "blockOwnerDeletion": true,
	}}
	meta["managedFields"] = []any{map[string]any{
		"apiVersion": obj["apiVersion"], "fieldsType": "FieldsV1", "manager": "metacontroller", "operation": "Update", "time": "2026-11-22T04:18:44Z",
		"fieldsV1": map[string]any{"f:metadata": map[string]any{
			"f:annotations": map[string]any{".": map[string]any{}, "f:" + plan.LastAppliedAnnotation: map[string]any{}},
			"f:labels":      map[string]any{".": map[string]any{}},
		}, "f:spec": map[string]any{".": map[string]any{}}},
	}}
	spec := obj["spec"].(map[string]any)
	switch kind {
	case plan.KindService:
		ip := "10.96.0.119"
		if spec["clusterIP"] == "None" {
			ip = "None"
		}
		spec["clusterIP"], spec["clusterIPs"] = ip, []any{ip}
		spec["internalTrafficPolicy"], spec["ipFamilies"], spec["ipFamilyPolicy"] = "Cluster", []any{"IPv4"}, "SingleStack"
		spec["sessionAffinity"], spec["type"] = "None", "ClusterIP"
		obj["status"] = map[string]any{"loadBalancer": map[string]any{}}
	case plan.KindPDB:
		// Every member healthy: the budget allows what maxUnavailable says.
		unavailable, _ := spec["maxUnavailable"].(float64)
		meta["generation"] = 1
		obj["status"] = map[string]any{
			"currentHealthy": pods, "desiredHealthy": pods - int(unavailable), "disruptionsAllowed": int(unavailable), "expectedPods": pods, "observedGeneration": 1,
			"conditions": []any{map[string]any{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
				"lastTransitionTime": "2026-11-22T04:18:50Z", "message": "", "observedGeneration": 1}},
		}
	}
	return obj, nil
}
