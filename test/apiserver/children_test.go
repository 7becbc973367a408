package apiserver

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// testRenderedChildren: what the hook answers, the API server accepts. The
// children of three clusters, as encoded on the wire, go through a
// server-side dry run with strict field validation: a plain cluster (its
// Services, budget, fence and seed), a fence narrowed by clientFrom, and
// an auto-TLS cluster through its first three syncs (the CAs, the leaves,
// the seed that mounts them).
func testRenderedChildren(t *testing.T, k *kube) {
	// A namespace of its own, with the ServiceAccount the controller
	// manager would make (there is none here): a Pod names it.
	const ns = "rendered-children"
	k.mustKubectl(t, "", "create", "namespace", ns)
	k.mustKubectl(t, "", "create", "serviceaccount", "default", "-n", ns)
	off := false
	clientFrom := []byte(`[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "etcd-hook"}}}, {"podSelector": {"matchLabels": {"app": "my-app"}}}, {"ipBlock": {"cidr": "10.0.0.0/8"}}]`)
	tests := []struct {
		name  string
		spec  func(*v1beta2.ClusterSpec)
		syncs int
	}{
		{"plain", func(*v1beta2.ClusterSpec) {}, 1},
		{"fence-client-from", func(s *v1beta2.ClusterSpec) {
			s.Network = &v1beta2.NetworkSpec{}
			if err := json.Unmarshal(clientFrom, &s.Network.ClientFrom); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"no-fence", func(s *v1beta2.ClusterSpec) { s.Network = &v1beta2.NetworkSpec{Policies: &off} }, 1},
		{"auto-tls", func(s *v1beta2.ClusterSpec) { s.TLS = &v1beta2.TLSPolicy{Auto: &v1beta2.AutoTLS{}} }, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1beta2.EtcdCluster{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1beta2.APIVersion, Kind: v1beta2.Kind},
				ObjectMeta: metav1.ObjectMeta{Name: tt.name, Namespace: ns, UID: types.UID("uid-" + tt.name), Generation: 1},
				Spec:       v1beta2.ClusterSpec{Size: 3},
			}
			tt.spec(&c.Spec)
			o := &etcdcluster.Observed{Cluster: c, Now: time.Now(), FreshSuffix: "abcde"}
			kinds := map[string]int{}
			for sync := range tt.syncs {
				d := etcdcluster.Plan(o)
				body, err := hooks.Encode(d, false)
				if err != nil {
					t.Fatal(err)
				}
				var answer struct {
					Children []json.RawMessage `json:"children"`
				}
				if err := json.Unmarshal(body, &answer); err != nil {
					t.Fatal(err)
				}
				secrets := map[string]*corev1.Secret{}
				for _, child := range answer.Children {
					noWarnings(t, k.mustKubectl(t, string(child), "apply", "--dry-run=server", "--validate=strict", "-n", ns, "-f", "-"))
					var meta struct {
						Kind     string            `json:"kind"`
						Metadata metav1.ObjectMeta `json:"metadata"`
					}
					_ = json.Unmarshal(child, &meta)
					kinds[meta.Kind]++
					if meta.Kind == "Secret" {
						var s corev1.Secret
						if err := json.Unmarshal(child, &s); err != nil {
							t.Fatalf("sync %d: Secret %s: %v", sync, meta.Metadata.Name, err)
						}
						s.UID, s.ResourceVersion = types.UID(fmt.Sprintf("uid-%s-%d", s.Name, sync)), "1"
						secrets[s.Name] = &s
					}
				}
				o.SecretChildren = secrets
			}
			t.Logf("%s: children accepted by kind: %v", tt.name, kinds)
			if tt.name != "no-fence" && kinds["NetworkPolicy"] == 0 {
				t.Errorf("no NetworkPolicy was rendered")
			}
			if tt.name == "auto-tls" && (kinds["Secret"] < 5 || kinds["Pod"] == 0) {
				t.Errorf("auto TLS: %v, want the CA Secret, then it and the three leaves, then the seed", kinds)
			}
		})
	}
}
