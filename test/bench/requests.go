package bench

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/plan"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// capturedPod is a Pod exactly as the API server sent it to Metacontroller
// and Metacontroller to the hook: managedFields, defaults, token volume.
// Steady-state requests are built from it so that they weigh what real
// ones weigh. It is read once: callers copy it (deepCopy) before changing
// it, and the scale benchmark builds tens of thousands of requests.
var capturedPod = sync.OnceValues(readCapturedPod)

func readCapturedPod() (map[string]any, error) {
	root, err := testenv.FindModuleRoot()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, "test", "fixtures", "three-pending-pods.json"))
	if err != nil {
		return nil, err
	}
	var req struct {
		Children map[string]map[string]map[string]any `json:"children"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return nil, err
	}
	for _, pod := range req.Children["Pod.v1"] {
		return pod, nil
	}
	return nil, fmt.Errorf("no Pod in the captured request")
}

// clusterRequest is the sync request of a converged cluster of the given
// members: each a running, ready Pod carrying the hook's own rendering as
// its last applied configuration, and the status the hook last wrote.
func clusterRequest(cluster, uid string, members []string, version string, status v1beta2.ClusterStatus) ([]byte, error) {
	return clusterRequestTLS(cluster, uid, members, version, status, nil)
}

// clusterRequestTLS is clusterRequest for a cluster with spec.TLS when ct
// is set: the spec names the Secrets, which the request relates, and each
// Pod runs the etcd command the planner renders (https URLs advertised,
// certificate flags) and mounts the Secret volumes, in its spec and in
// its last applied configuration alike. The rest is as for a plain
// cluster (whose Pods carry the captured Pod's spec, without a command).
func clusterRequestTLS(cluster, uid string, members []string, version string, status v1beta2.ClusterStatus, ct *clusterTLS) ([]byte, error) {
	template, err := capturedPod()
	if err != nil {
		return nil, err
	}
	const ns = "default"
	pods := map[string]any{}
	for _, name := range members {
		pod := deepCopy(template)
		meta := pod["metadata"].(map[string]any)
		meta["name"] = name
		// Each Pod its own UID, stable from request to request, as the
		// API server gives them; the captured Pod's would be shared by
		// every member, which no real request does (and which defeats
		// the planner's memo of what each Pod last applied).
		meta["uid"] = podUID(uid, name)
		meta["labels"] = map[string]any{"app": "etcd", "etcd_cluster": cluster, "etcd_node": name, "controller-uid": uid}
		rendered := map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": meta["labels"]},
			"spec": map[string]any{
				"hostname": name, "subdomain": cluster, "restartPolicy": "Always",
				"containers": []any{map[string]any{
					"name": "etcd", "image": "quay.io/coreos/etcd:v" + version,
					"command": []any{"/usr/local/bin/etcd", "--name=" + name, "--data-dir=/var/etcd/data",
						"--initial-cluster-state=existing", "--initial-cluster-token=bench-" + uid},
				}},
			},
		}
		spec := pod["spec"].(map[string]any)
		container := spec["containers"].([]any)[0].(map[string]any)
		if ct != nil {
			command, volumes, mounts := ct.memberTLS(name)
			renderedSpec := rendered["spec"].(map[string]any)
			renderedContainer := renderedSpec["containers"].([]any)[0].(map[string]any)
			renderedContainer["command"], renderedContainer["volumeMounts"], renderedSpec["volumes"] = command, mounts, volumes
			container["command"] = command
			container["volumeMounts"] = append(container["volumeMounts"].([]any), mounts...)
			spec["volumes"] = append(spec["volumes"].([]any), volumes...)
		}
		if trust := ct.trust(); trust != "" {
			// As the planner renders an auto-TLS member (AnnotationTrustedCA).
			rendered["metadata"].(map[string]any)["annotations"] = map[string]any{etcdcluster.AnnotationTrustedCA: trust}
		}
		applied, _ := json.Marshal(rendered)
		meta["annotations"] = map[string]any{plan.LastAppliedAnnotation: string(applied)}
		if trust := ct.trust(); trust != "" {
			meta["annotations"].(map[string]any)[etcdcluster.AnnotationTrustedCA] = trust
		}
		spec["hostname"], spec["subdomain"] = name, cluster
		container["image"] = "quay.io/coreos/etcd:v" + version
		now := time.Now().UTC().Format(time.RFC3339)
		pod["status"] = map[string]any{
			"phase": "Running", "podIP": "10.0.0.1",
			"conditions": []any{
				map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": now},
				map[string]any{"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
			},
			"containerStatuses": []any{map[string]any{"name": "etcd", "ready": true, "restartCount": 0, "image": "quay.io/coreos/etcd:v" + version,
				"state": map[string]any{"running": map[string]any{"startedAt": now}}}},
		}
		pods[name] = pod
	}
	parentSpec := map[string]any{"size": len(members), "version": version}
	related := map[string]any{}
	secretChildren := map[string]any{}
	switch {
	case ct != nil && ct.auto:
		parentSpec["TLS"] = ct.policy
		secretChildren = ct.related()
	case ct != nil:
		parentSpec["TLS"] = ct.policy
		related[hooks.RelatedSecrets] = ct.related()
	}
	req := map[string]any{
		"controller": map[string]any{"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController", "metadata": map[string]any{"name": "etcd-hook"}},
		"parent": map[string]any{
			"apiVersion": v1beta2.APIVersion, "kind": v1beta2.Kind,
			"metadata": map[string]any{"name": cluster, "namespace": ns, "uid": uid, "generation": 1},
			"spec":     parentSpec,
			"status":   status,
		},
		"children": map[string]any{
			"Pod.v1":                        pods,
			"Service.v1":                    map[string]any{},
			"PersistentVolumeClaim.v1":      map[string]any{},
			"PodDisruptionBudget.policy/v1": map[string]any{},
			hooks.ChildSecrets:              secretChildren,
			hooks.ChildNetworkPolicies:      map[string]any{},
		},
		"related":    related,
		"finalizing": false,
	}
	return json.Marshal(req)
}

// podUID is a UID for the Pod name of the cluster uid, in the API server's
// format, the same in every request.
func podUID(cluster, name string) string {
	h := sha256.Sum256([]byte(cluster + "/" + name))
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func deepCopy(v map[string]any) map[string]any {
	b, _ := json.Marshal(v)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
