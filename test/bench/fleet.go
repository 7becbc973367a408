package bench

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/plan"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// fleetNamespace is the namespace clusterRequest puts every cluster in.
const fleetNamespace = "default"

// fleetCluster is one EtcdCluster of the scale benchmark.
type fleetCluster struct {
	name, uid   string
	members     []string
	unreachable bool
	// tls is set for a cluster with spec.TLS, whose members serve clients
	// TLS with client certificate auth.
	tls *clusterTLS
}

// newFleet names n clusters of 3 members; those at the unreachable
// positions have no etcd that answers. With tlsEvery > 0, every
// tlsEvery-th cluster (the last of each group of tlsEvery) has spec.TLS,
// with Secrets of its own CA, issued on every core at once: a fleet of
// 10,000 has 5,000 CAs.
func newFleet(n int, unreachable []int, tlsEvery int) ([]fleetCluster, error) {
	fleet := make([]fleetCluster, n)
	issue := issueClusterTLS
	if os.Getenv("BENCH_SCALE_TLS") == "auto" {
		// The hook's own certificates (spec.TLS.auto), carried as the
		// clusters' Secret children.
		issue = issueAutoClusterTLS
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, n)
	for range runtime.NumCPU() {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				name := fmt.Sprintf("scale-%04d", i)
				uid := fmt.Sprintf("5ca1e000-0000-4000-8000-%012d", i)
				fleet[i] = fleetCluster{name: name, uid: uid, members: memberNames(name, uid, 3), unreachable: slices.Contains(unreachable, i)}
				if isTLSAt(i, tlsEvery) {
					fleet[i].tls, errs[i] = issue(name, fleetNamespace, uid, etcdtest.DefaultVersion)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return fleet, nil
}

// isTLSAt tells whether newFleet gives the cluster at i spec.TLS.
func isTLSAt(i, tlsEvery int) bool { return tlsEvery > 0 && i%tlsEvery == tlsEvery-1 }

// spreadPositions places u clusters evenly through a round-robin of n:
// each in the middle of one of u equal slices (1000 and 5 give 100, 300,
// 500, 700 and 900). With tlsEvery > 0 they take turns, plain and TLS, each
// moved to the next position of its kind, so that a fleet with TLS
// clusters has unreachable ones of both kinds.
func spreadPositions(n, u, tlsEvery int) []int {
	u = min(u, n)
	var out []int
	for k := range u {
		i := (2*k + 1) * n / (2 * u)
		wantTLS := tlsEvery == 1 || (tlsEvery > 1 && k%2 == 1)
		for i < n && (slices.Contains(out, i) || (tlsEvery > 0 && isTLSAt(i, tlsEvery) != wantTLS)) {
			i++
		}
		if i == n {
			// The end of the fleet: the first free position of any kind.
			for i = 0; slices.Contains(out, i); i++ {
			}
		}
		out = append(out, i)
	}
	return out
}

// addresses are the cluster's, as its spec asks members to serve.
func (c fleetCluster) addresses() plan.Addresses {
	ec := &v1beta2.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: fleetNamespace}}
	if c.tls != nil {
		ec.Spec.TLS = c.tls.policy
	}
	return plan.AddressesOf(ec)
}

// request is the cluster's steady sync request with the given status.
func (c fleetCluster) request(status v1beta2.ClusterStatus) ([]byte, error) {
	return clusterRequestTLS(c.name, c.uid, c.members, etcdtest.DefaultVersion, status, c.tls)
}

// memberNames names members as the hook does: the seed after the UID,
// the others <cluster>-<random suffix>, whose randomness is drawn from the
// UID here so that every run syncs the same names.
func memberNames(cluster, uid string, n int) []string {
	names := []string{etcdcluster.SeedName(cluster, uid)}
	for i := 1; i < n; i++ {
		sum := sha256.Sum256(fmt.Appendf(nil, "member/%s/%d", uid, i))
		names = append(names, cluster+"-"+etcdcluster.RandomSuffix(sum[:]))
	}
	return names
}

// fleetDNS resolves the member names the hook dials, as the cluster DNS
// does (with or without .cluster.local): healthy clusters' members to one
// of plain's or of tls's addresses by their spec (the i-th cluster to the
// i-th address, round), the others to unreachable.
func fleetDNS(fleet []fleetCluster, plain, tls []netip.Addr, unreachable netip.Addr) (func(name string) []netip.Addr, error) {
	hosts := map[string]netip.Addr{}
	for i, c := range fleet {
		var ip netip.Addr
		switch {
		case c.unreachable:
			ip = unreachable
		case c.tls != nil:
			ip = tls[i%len(tls)]
		default:
			ip = plain[i%len(plain)]
		}
		for _, m := range c.members {
			u, err := url.Parse(c.addresses().ClientURL(m))
			if err != nil {
				return nil, err
			}
			hosts[u.Hostname()] = ip
		}
	}
	return func(name string) []netip.Addr {
		if ip, ok := hosts[strings.TrimSuffix(name, ".cluster.local")]; ok {
			return []netip.Addr{ip}
		}
		return nil
	}, nil
}
