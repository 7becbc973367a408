package harness

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/internal/tlstest"
)

// ptrAPI holds Pods whose reverse names the tests look up:
//
//	127.0.1.1 ns/c-0    hostname c-0, subdomain c, ready   (headless Service c)
//	127.0.1.2 ns/c-1    hostname c-1, subdomain c, not ready
//	127.0.1.3 ns/bare   no hostname nor subdomain, ready
//	127.0.1.4 other/d-0 hostname d-0, subdomain d, ready   (no Service d)
//	127.0.1.5 ns/e-0    hostname e-0, subdomain e, not ready (headless Service e publishes not-ready addresses)
func ptrAPI(t *testing.T) *APIServer {
	t.Helper()
	api := NewAPIServer()
	mk := func(o string) {
		if _, err := api.Create(obj(o)); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(namespace, name, app, hostname, subdomain, ip string, ready bool) {
		spec := `"containers":[{"name":"etcd","image":"e"}]`
		if hostname != "" {
			spec += `,"hostname":"` + hostname + `","subdomain":"` + subdomain + `"`
		}
		mk(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name + `","namespace":"` + namespace + `","labels":{"app":"` + app + `"}},"spec":{` + spec + `}}`)
		st := map[string]any{"podIP": ip, "conditions": []any{map[string]any{"type": "Ready", "status": map[bool]string{true: "True", false: "False"}[ready]}}}
		if _, err := api.UpdateStatus(Ref{Type: TypePod, Namespace: namespace, Name: name}, "", st); err != nil {
			t.Fatal(err)
		}
	}
	pod("ns", "c-0", "c", "c-0", "c", "127.0.1.1", true)
	pod("ns", "c-1", "c", "c-1", "c", "127.0.1.2", false)
	pod("ns", "bare", "c", "", "", "127.0.1.3", true)
	pod("other", "d-0", "d", "d-0", "d", "127.0.1.4", true)
	pod("ns", "e-0", "e", "e-0", "e", "127.0.1.5", false)
	mk(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"c","namespace":"ns"},"spec":{"clusterIP":"None","selector":{"app":"c"}}}`)
	mk(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"e","namespace":"ns"},"spec":{"clusterIP":"None","publishNotReadyAddresses":true,"selector":{"app":"e"}}}`)
	return api
}

// TestClusterPTR: a Pod IP resolves back to <hostname>.<subdomain>.<ns>.svc.cluster.local.
// exactly when that name resolves to the IP, in either DNS mode; any other
// address is NXDOMAIN.
func TestClusterPTR(t *testing.T) {
	api := ptrAPI(t)
	const notFound = "NXDOMAIN"
	tests := []struct {
		strict bool
		ip     string
		want   []string // or {notFound}
	}{
		{false, "127.0.1.1", []string{"c-0.c.ns.svc.cluster.local."}},
		{false, "127.0.1.2", []string{"c-1.c.ns.svc.cluster.local."}},
		{false, "127.0.1.3", []string{notFound}},
		{false, "127.0.1.4", []string{"d-0.d.other.svc.cluster.local."}},
		{false, "127.0.9.9", []string{notFound}},
		{true, "127.0.1.1", []string{"c-0.c.ns.svc.cluster.local."}},
		{true, "127.0.1.2", []string{notFound}}, // not ready
		{true, "127.0.1.3", []string{notFound}},
		{true, "127.0.1.4", []string{notFound}}, // no headless Service
		{true, "127.0.1.5", []string{"e-0.e.ns.svc.cluster.local."}},
	}
	for _, strict := range []bool{false, true} {
		d, err := StartDNS("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		d.AddPTRSource(clusterPTR(api, strict))
		for _, network := range []string{"udp", "tcp"} {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var dl net.Dialer
				return dl.DialContext(ctx, network, d.Addr().String())
			}}
			for _, tt := range tests {
				if tt.strict != strict {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				got, err := r.LookupAddr(ctx, tt.ip)
				cancel()
				var de *net.DNSError
				if errors.As(err, &de) && de.IsNotFound {
					got = []string{notFound}
				} else if err != nil {
					t.Errorf("strict=%v %s: LookupAddr(%s): %v", strict, network, tt.ip, err)
					continue
				}
				if d := cmp.Diff(tt.want, got); d != "" {
					t.Errorf("strict=%v %s: LookupAddr(%s) (-want +got):\n%s", strict, network, tt.ip, d)
				}
			}
		}
	}
}

// etcdHostInDNS is the match etcd's TLS listener makes after the reverse
// lookup of a caller whose certificate has DNS SANs (isHostInDNS in
// go.etcd.io/etcd/client/pkg/v3/transport/listener_tls.go): the name
// without its trailing dot equals a SAN, or ends with a wildcard SAN
// without its "*".
func etcdHostInDNS(names, sans []string) bool {
	for _, name := range names {
		name = strings.TrimSuffix(name, ".")
		for _, san := range sans {
			if strings.HasPrefix(san, "*.") {
				if strings.HasSuffix(name, san[1:]) {
					return true
				}
			} else if san == name {
				return true
			}
		}
	}
	return false
}

// TestPTRMatchesEtcdSANs: what CoreDNS answers, and so the harness, only
// matches the cluster-domain form of the wildcard; the certificates the
// README tells users to issue carry both.
func TestPTRMatchesEtcdSANs(t *testing.T) {
	api := ptrAPI(t)
	d, err := StartDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.AddPTRSource(clusterPTR(api, true))
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", d.Addr().String())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	names, err := r.LookupAddr(ctx, "127.0.1.1")
	if err != nil {
		t.Fatal(err)
	}
	withDomain, _ := tlstest.ClusterNames("c", "ns", "cluster.local")
	withoutDomain, _ := tlstest.ClusterNames("c", "ns", "")
	tests := []struct {
		name string
		sans []string
		want bool
	}{
		{"*.<cluster>.<ns>.svc only", []string{"*.c.ns.svc"}, false},
		{"*.<cluster>.<ns>.svc.cluster.local", []string{"*.c.ns.svc.cluster.local"}, true},
		{"exact name", []string{"c-0.c.ns.svc.cluster.local"}, true},
		{"another cluster", []string{"*.d.ns.svc.cluster.local"}, false},
		{"tlstest.ClusterNames with the domain", withDomain, true},
		{"tlstest.ClusterNames without the domain", withoutDomain, false},
	}
	for _, tt := range tests {
		if got := etcdHostInDNS(names, tt.sans); got != tt.want {
			t.Errorf("%s: %v match %v = %v, want %v", tt.name, names, tt.sans, got, tt.want)
		}
	}
}
