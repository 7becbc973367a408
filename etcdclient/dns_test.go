package etcdclient

import "testing"

func TestClusterDomain(t *testing.T) {
	for _, tc := range []struct {
		name, conf, want, reason string
	}{
		{"pod", "search demo.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n", "cluster.local", "a Pod's resolv.conf in Kubernetes"},
		{"custom domain", "search ns.svc.example.org svc.example.org example.org\n", "example.org", "the cluster's own domain, not a guess"},
		{"outside Kubernetes", "nameserver 1.1.1.1\nsearch home.lan\n", "", "names are left to the resolver"},
		{"test sandbox", "nameserver 127.0.0.53\nsearch svc.cluster.local cluster.local\noptions ndots:5\n", "cluster.local", "the e2e harness's"},
		{"last line wins", "search svc.old.local\nsearch other.lan\n", "", "as the resolver reads it"},
		{"bare svc", "search svc. svc\n", "", "no domain after svc"},
		{"trailing dots", "search svc.cluster.local.\n", "cluster.local", "a rooted search entry"},
		{"empty", "", "", "no file content"},
	} {
		if got := clusterDomain([]byte(tc.conf)); got != tc.want {
			t.Errorf("%s: clusterDomain = %q, want %q: %s", tc.name, got, tc.want, tc.reason)
		}
	}
}

func TestDialAddress(t *testing.T) {
	for _, tc := range []struct {
		hostport, domain, want, reason string
	}{
		{"m0.demo.ns.svc:2379", "cluster.local", "m0.demo.ns.svc.cluster.local.:2379", "a member's name, looked up once"},
		{"m0.demo.ns.svc:2379", "", "m0.demo.ns.svc:2379", "no domain known: as it is"},
		{"127.0.0.1:2379", "cluster.local", "127.0.0.1:2379", "an address"},
		{"[::1]:2379", "cluster.local", "[::1]:2379", "an IPv6 address"},
		{"m0.demo.ns.svc.cluster.local:2379", "cluster.local", "m0.demo.ns.svc.cluster.local:2379", "already in full"},
		{"etcd.example.com:2379", "cluster.local", "etcd.example.com:2379", "not a Service-style name"},
	} {
		if got := dialAddress(tc.hostport, tc.domain); got != tc.want {
			t.Errorf("dialAddress(%q, %q) = %q, want %q: %s", tc.hostport, tc.domain, got, tc.want, tc.reason)
		}
	}
}
