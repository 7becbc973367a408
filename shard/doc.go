// Package shard spreads a fleet's syncs across the hook's replicas: each
// parent has one owner among the replicas a DNS name lists (a headless
// Service), and a replica that receives a sync it does not own forwards the
// request, unchanged, to the owner. So each replica keeps the connections,
// memos and per-object series of its share of the fleet only, and two
// replicas each hold about half of what one would.
//
// Ownership is rendezvous hashing of the parent's UID over the replicas'
// addresses (Owner): every replica computes it alone, from what it
// resolved, and a replica joining or leaving moves only the parents it
// takes or held.
//
// Forwarding never costs a sync and never runs one twice:
//   - a forwarded request is never forwarded again, so replicas whose views
//     of the peers differ for a moment cannot make a loop;
//   - when the owner cannot be reached before the request is sent (refused,
//     not resolvable, a TLS handshake that fails), the receiving replica
//     answers the sync itself, as it would without peers;
//   - once the request is sent, the owner may be acting on it, so a lost
//     answer is a 502 (Metacontroller retries with backoff), never a second
//     sync beside the first.
//
// The package moves bytes: it reads only the parent's metadata from a
// request, and imports neither the wire contract (hooks) nor etcd.
package shard
