package bench

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/etcdhook/etcd-hook/sync"
)

// fleetNamespace is the namespace clusterRequest puts every cluster in.
const fleetNamespace = "default"

// fleetCluster is one EtcdCluster of the scale benchmark.
type fleetCluster struct {
	name, uid   string
	members     []string
	unreachable bool
}

// newFleet names n clusters of 3 members; those at the unreachable
// positions have no etcd that answers.
func newFleet(n int, unreachable []int) []fleetCluster {
	fleet := make([]fleetCluster, n)
	for i := range fleet {
		name := fmt.Sprintf("scale-%04d", i)
		uid := fmt.Sprintf("5ca1e000-0000-4000-8000-%012d", i)
		fleet[i] = fleetCluster{name: name, uid: uid, members: memberNames(name, uid, 3), unreachable: slices.Contains(unreachable, i)}
	}
	return fleet
}

// memberNames names members as the hook does: the seed after the UID,
// the others <cluster>-<random suffix>, whose randomness is drawn from the
// UID here so that every run syncs the same names.
func memberNames(cluster, uid string, n int) []string {
	names := []string{sync.SeedName(cluster, uid)}
	for i := 1; i < n; i++ {
		sum := sha256.Sum256(fmt.Appendf(nil, "member/%s/%d", uid, i))
		names = append(names, cluster+"-"+sync.RandomSuffix(sum[:]))
	}
	return names
}

// fleetDNS resolves the member names the hook dials, as the cluster DNS
// does (with or without .cluster.local): healthy clusters' members to
// healthy, the others to unreachable.
func fleetDNS(fleet []fleetCluster, healthy, unreachable netip.Addr) (func(name string) []netip.Addr, error) {
	hosts := map[string]netip.Addr{}
	for _, c := range fleet {
		ip := healthy
		if c.unreachable {
			ip = unreachable
		}
		for _, m := range c.members {
			u, err := url.Parse(plainAddresses(fleetNamespace, c.name).ClientURL(m))
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
