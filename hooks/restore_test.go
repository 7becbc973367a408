package hooks_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRestoreRoutes: the customize answers name exactly what the syncs
// read, and an EtcdRestore's mistakes come back as a status, not an error.
func TestRestoreRoutes(t *testing.T) {
	srv := testServer(t)
	cases := []struct {
		name, route, body, reason string
		status                    int
		want                      string // a JSON value the answer must equal, or a substring
	}{
		{"cluster customize", "/customize",
			`{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","metadata":{"name":"demo","namespace":"prod"},"spec":{"size":3}}}`,
			"the EtcdRestore named after the cluster, and every EtcdBackup of its namespace", 200,
			`{"relatedResources":[{"apiVersion":"etcd.database.coreos.com/v1beta2","resource":"etcdrestores","namespace":"prod","names":["demo"]},` +
				`{"apiVersion":"etcd.database.coreos.com/v1beta2","resource":"etcdbackups","labelSelector":{}}]}`},
		{"TLS cluster customize", "/customize",
			`{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","metadata":{"name":"demo","namespace":"prod"},` +
				`"spec":{"size":3,"TLS":{"static":{"member":{"peerSecret":"p","serverSecret":"s"},"operatorSecret":"o"}}}}}`,
			"a TLS cluster's Secrets, by name, so that the hook calls members without Kubernetes credentials", 200,
			`{"relatedResources":[{"apiVersion":"etcd.database.coreos.com/v1beta2","resource":"etcdrestores","namespace":"prod","names":["demo"]},` +
				`{"apiVersion":"etcd.database.coreos.com/v1beta2","resource":"etcdbackups","labelSelector":{}},` +
				`{"apiVersion":"v1","resource":"secrets","namespace":"prod","names":["p","s","o"]}]}`},
		{"TLS cluster moving to auto, customize", "/customize",
			`{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","metadata":{"name":"demo","namespace":"prod"},` +
				`"spec":{"size":3,"TLS":{"auto":{}}},"status":{"TLS":{"static":{"member":{"peerSecret":"p","serverSecret":"s"},"operatorSecret":"o"}}}}}`,
			"the Secrets status.TLS.static names, which members still run with while they move to spec.TLS.auto, beside the hook's own names", 200,
			`{"relatedResources":[{"apiVersion":"etcd.database.coreos.com/v1beta2","resource":"etcdrestores","namespace":"prod","names":["demo"]},` +
				`{"apiVersion":"etcd.database.coreos.com/v1beta2","resource":"etcdbackups","labelSelector":{}},` +
				`{"apiVersion":"v1","resource":"secrets","namespace":"prod","names":["demo-ca","demo-peer-tls","demo-server-tls","demo-operator-tls","p","s","o"]}]}`},
		{"restore customize", "/restore/customize",
			`{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdRestore","metadata":{"name":"demo","namespace":"prod"},"spec":{"etcdCluster":{"name":"demo"},"backupStorageType":"S3","s3":{"path":"b/k","awsSecret":"aws"}}}}`,
			"the cluster and the Secret, by name", 200,
			`{"relatedResources":[{"apiVersion":"etcd.database.coreos.com/v1beta2","resource":"etcdclusters","namespace":"prod","names":["demo"]},` +
				`{"apiVersion":"v1","resource":"secrets","namespace":"prod","names":["aws"]}]}`},
		{"name differs", "/restore/sync",
			`{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdRestore","metadata":{"name":"demo","namespace":"prod","uid":"u"},"spec":{"etcdCluster":{"name":"other"},"backupStorageType":"S3","s3":{"path":"b/k","awsSecret":"aws"}}},"related":{}}`,
			"a mistaken EtcdRestore is answered with a status naming the mistake", 200,
			`must equal metadata.name`},
		{"wrong kind", "/restore/sync",
			`{"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","metadata":{"name":"demo","namespace":"prod"}}}`,
			"a request for another kind is refused with a JSON error", 422, `"error"`},
		{"not JSON", "/customize", `{`, "a body that is not JSON is refused", 400, `"error"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, srv.URL+tc.route, "application/json", []byte(tc.body))
			if code != tc.status {
				t.Fatalf("%s: HTTP %d %s, want %d", tc.reason, code, body, tc.status)
			}
			if strings.HasPrefix(tc.want, "{") {
				var want, got any
				_ = json.Unmarshal([]byte(tc.want), &want)
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
				}
			} else if !strings.Contains(string(body), tc.want) {
				t.Errorf("%s: answer %s lacks %q", tc.reason, body, tc.want)
			}
		})
	}
}
