package harness

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// fakeHook is a deliberately small stand-in for the real hook, only good
// enough to prove the harness: it renders one seed etcd Pod per parent with
// the flags the real hook uses, a headless peer Service, a client Service and
// a PDB, and a status computed from what it observes.
type fakeHook struct {
	srv *httptest.Server

	mu    sync.Mutex
	cfg   fakeConfig
	calls []fakeCall
}

// fakeConfig is what a test can change between syncs.
type fakeConfig struct {
	version       string  // etcd version of the Pod image, e.g. "3.6.16"
	noPods        bool    // render no Pod at all
	noClient      bool    // leave the client Service out
	extraService  bool    // add a Service named <cluster>-extra
	usePVC        bool    // data on a PVC instead of an emptyDir
	resyncAfter   float64 // resyncAfterSeconds in every answer
	statusNote    string  // copied into status.note
	restartPolicy string  // of the Pod, "" = Always
}

type fakeCall struct {
	At         time.Time
	Path       string
	Parent     string
	Finalizing bool
	Children   map[string]map[string]json.RawMessage
}

func newFakeHook() *fakeHook {
	f := &fakeHook{cfg: fakeConfig{version: "3.6.16"}}
	f.srv = httptest.NewServer(f)
	return f
}

func (f *fakeHook) URL() string { return f.srv.URL }
func (f *fakeHook) Close()      { f.srv.Close() }

func (f *fakeHook) set(edit func(*fakeConfig)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	edit(&f.cfg)
}

func (f *fakeHook) Calls(parent string) []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeCall
	for _, c := range f.calls {
		if parent == "" || c.Parent == parent {
			out = append(out, c)
		}
	}
	return out
}

type fakeRequest struct {
	Parent struct {
		Metadata struct {
			Name       string `json:"name"`
			Namespace  string `json:"namespace"`
			UID        string `json:"uid"`
			Generation int64  `json:"generation"`
		} `json:"metadata"`
		Spec map[string]any `json:"spec"`
	} `json:"parent"`
	Children   map[string]map[string]json.RawMessage `json:"children"`
	Finalizing bool                                  `json:"finalizing"`
}

func (f *fakeHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "want POST application/json", http.StatusBadRequest)
		return
	}
	var req fakeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	md := req.Parent.Metadata
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{At: time.Now(), Path: r.URL.Path, Parent: md.Namespace + "/" + md.Name, Finalizing: req.Finalizing, Children: req.Children})
	cfg := f.cfg
	f.mu.Unlock()

	ready := 0
	for _, raw := range req.Children[TypePod] {
		var pod Object
		if json.Unmarshal(raw, &pod) == nil && podReady(pod) {
			ready++
		}
	}
	resp := map[string]any{}
	if req.Finalizing {
		resp["children"] = []any{}
		resp["finalized"] = len(req.Children[TypePod]) == 0
		resp["status"] = map[string]any{"phase": "Deleting"}
		resp["resyncAfterSeconds"] = 0.5
		writeJSON(w, resp)
		return
	}
	c, ns := md.Name, md.Namespace
	labels := map[string]any{"app": "etcd", "etcd_cluster": c}
	children := []any{
		map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": c, "labels": labels},
			"spec": map[string]any{
				"clusterIP": "None", "publishNotReadyAddresses": true, "selector": labels,
				"ports": []any{map[string]any{"name": "client", "port": 2379}, map[string]any{"name": "peer", "port": 2380}},
			},
		},
		map[string]any{
			"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
			"metadata": map[string]any{"name": c, "labels": labels},
			"spec":     map[string]any{"minAvailable": 1, "selector": map[string]any{"matchLabels": labels}},
		},
	}
	if !cfg.noClient {
		children = append(children, map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": c + "-client", "labels": labels},
			"spec":     map[string]any{"selector": labels, "ports": []any{map[string]any{"name": "client", "port": 2379}}},
		})
	}
	if cfg.extraService {
		children = append(children, map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": c + "-extra"},
			"spec":     map[string]any{"selector": labels, "ports": []any{map[string]any{"port": 2379}}},
		})
	}
	if !cfg.noPods {
		m := c + "-0"
		vol := map[string]any{"name": "etcd-data", "emptyDir": map[string]any{}}
		if cfg.usePVC {
			vol = map[string]any{"name": "etcd-data", "persistentVolumeClaim": map[string]any{"claimName": m + "-data"}}
			children = append(children, map[string]any{
				"apiVersion": "v1", "kind": "PersistentVolumeClaim",
				"metadata": map[string]any{"name": m + "-data", "labels": labels},
				"spec": map[string]any{
					"accessModes": []any{"ReadWriteOnce"},
					"resources":   map[string]any{"requests": map[string]any{"storage": "1Gi"}},
				},
			})
		}
		peer := fmt.Sprintf("http://%s.%s.%s.svc:2380", m, c, ns)
		policy := cfg.restartPolicy
		if policy == "" {
			policy = "Always"
		}
		children = append(children, map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": m, "labels": labels},
			"spec": map[string]any{
				"hostname": m, "subdomain": c, "restartPolicy": policy, "terminationGracePeriodSeconds": 10,
				"containers": []any{map[string]any{
					"name":  "etcd",
					"image": "quay.io/coreos/etcd:v" + cfg.version,
					"command": []any{
						"/usr/local/bin/etcd", "--name=$(POD_NAME)", "--data-dir=/var/etcd/data",
						"--listen-client-urls=http://0.0.0.0:2379", "--listen-peer-urls=http://0.0.0.0:2380",
						fmt.Sprintf("--advertise-client-urls=http://%s.%s.%s.svc:2379", m, c, ns),
						"--initial-advertise-peer-urls=" + peer,
						"--initial-cluster=" + m + "=" + peer,
						"--initial-cluster-state=new",
						"--initial-cluster-token=" + md.UID,
					},
					"env": []any{map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}}},
					"ports": []any{
						map[string]any{"name": "client", "containerPort": 2379},
						map[string]any{"name": "peer", "containerPort": 2380},
					},
					"volumeMounts": []any{map[string]any{"name": "etcd-data", "mountPath": "/var/etcd"}},
					"readinessProbe": map[string]any{
						"httpGet":       map[string]any{"path": "/health", "port": 2379, "scheme": "HTTP"},
						"periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 2,
					},
				}},
				"volumes": []any{vol},
			},
		})
	}
	status := map[string]any{"readyMembers": ready, "phase": "Creating"}
	if ready > 0 {
		status["phase"] = "Running"
	}
	if cfg.statusNote != "" {
		status["note"] = cfg.statusNote
	}
	resp["children"] = children
	resp["status"] = status
	if cfg.resyncAfter > 0 {
		resp["resyncAfterSeconds"] = cfg.resyncAfter
	}
	writeJSON(w, resp)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
