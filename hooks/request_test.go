package hooks

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// The early read a sync starts once the parent is decoded (see
// reconcile.Prepare) calls a TLS cluster's members with the operator
// Secret's certificate: the related Secrets must be decoded by then.
func TestRelatedSecretsAreDecodedBeforeTheEarlyStart(t *testing.T) {
	body := []byte(`{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster",` +
		`"metadata":{"name":"demo","namespace":"prod"},"spec":{"size":3,"TLS":{"static":{"member":{"serverSecret":"s"},"operatorSecret":"o"}}}},` +
		`"children":{},"related":{"Secret.v1":{"o":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"o","namespace":"prod"},"data":{"etcd-client.crt":"Y2VydA=="}}}}}`)
	seen := -1
	o, err := decode(body, func(o *etcdcluster.Observed) { seen = len(o.Secrets) })
	if err != nil {
		t.Fatal(err)
	}
	if seen != 1 {
		t.Errorf("the early start saw %d Secrets, want the operator Secret", seen)
	}
	if got := string(o.Secrets["o"].Data["etcd-client.crt"]); got != "cert" {
		t.Errorf("Secret data %q, want the decoded bytes", got)
	}
}

// The StorageClasses a cluster on claims relates: present (even empty)
// when Metacontroller honoured the rule, nil when the request carries no
// such group, which the planner reports as a customize hook it cannot see.
func TestRelatedStorageClasses(t *testing.T) {
	const parent = `{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster",` +
		`"metadata":{"name":"demo","namespace":"prod"},"spec":{"size":3}},"children":{},"related":`
	tests := []struct {
		name, reason, related string
		want                  map[string]bool // class name → allowVolumeExpansion; nil: none related
	}{
		{"absent", "no group: a Metacontroller that lists no cluster-scoped related objects", `{}`, nil},
		{"empty", "the group with no object: the rule was honoured and the cluster has no class", `{"StorageClass.storage.k8s.io/v1":{}}`, map[string]bool{}},
		{"two", "each class by name, as Metacontroller keys cluster-scoped objects",
			`{"StorageClass.storage.k8s.io/v1":{"fast":{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"fast"},"provisioner":"x","allowVolumeExpansion":true},` +
				`"slow":{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"slow"},"provisioner":"x"}}}`,
			map[string]bool{"fast": true, "slow": false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := decode([]byte(parent+tc.related+"}"), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]bool
			if o.StorageClasses != nil {
				got = map[string]bool{}
				for name, sc := range o.StorageClasses {
					got[name] = sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: StorageClasses (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}
