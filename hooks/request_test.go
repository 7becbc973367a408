package hooks

import (
	"testing"

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
