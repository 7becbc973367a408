package etcdcluster

import (
	"crypto/sha256"
	"sort"
	"strings"

	"github.com/etcdhook/etcd-hook/membership"
)

// nameAlphabet has no vowels, so generated names never spell words, and no
// look-alike characters; it is the alphabet Kubernetes uses for generateName.
const nameAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// SuffixLength is the length of the random part of a member name.
const SuffixLength = 5

// RandomSuffix turns random bytes into a member-name suffix.
func RandomSuffix(random []byte) string {
	var b strings.Builder
	for i := 0; i < SuffixLength && i < len(random); i++ {
		b.WriteByte(nameAlphabet[int(random[i])%len(nameAlphabet)])
	}
	return b.String()
}

// SeedName is the first member's name. It is derived from the parent's UID
// rather than drawn at random, so that a sync answered twice (say, after a
// stale informer cache hid the first seed Pod) names the same seed instead
// of bootstrapping two clusters.
func SeedName(cluster, uid string) string {
	sum := sha256.Sum256([]byte("seed/" + uid))
	return cluster + "-" + RandomSuffix(sum[:])
}

// ClusterToken is the --initial-cluster-token: unique per EtcdCluster
// object, so members of two clusters can never join each other.
func ClusterToken(cluster, uid string) string {
	return cluster + "-" + uid
}

// initialCluster renders --initial-cluster for a member joining the given
// membership: every member, started or not, by name and peer URL.
func initialCluster(ms *membership.Membership, cluster string) string {
	parts := make([]string, 0, len(ms.Members))
	for _, m := range ms.Members {
		name := membership.MemberName(m, cluster)
		for _, u := range m.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
