package shard

import "hash/fnv"

// Owner returns the peer that owns key among peers (rendezvous, or
// highest-random-weight, hashing), or "" when there is none. Every caller
// with the same peers gets the same owner, whatever their order; removing
// a peer moves only the keys it owned, and adding one moves to it only the
// keys it now wins, about 1/n of them.
func Owner(key string, peers []string) string {
	var owner string
	var best uint64
	for _, p := range peers {
		s := score(p, key)
		if owner == "" || s > best || (s == best && p < owner) {
			owner, best = p, s
		}
	}
	return owner
}

// score is FNV-1a of peer and key, separated so that ("ab","c") and
// ("a","bc") differ, then mixed: FNV's high bits alone spread poorly over
// inputs that differ only in their last bytes.
func score(peer, key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(peer))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	return mix(h.Sum64())
}

// mix is the finalizer of MurmurHash3's 64-bit variant.
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
