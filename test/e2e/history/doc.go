// Package history records what clients of an etcd cluster saw and checks
// it the way etcd's own robustness suite does:
//
//   - Traffic runs concurrent clients (Put, linearizable Get, compare-and-
//     swap, Delete on a small key set), each on its own connection, and
//     records every operation with its call and return time.
//   - Check asks porcupine whether that history is linearizable, each key
//     modelled as a register. A write that failed or timed out may or may
//     not have been applied, and is checked both ways.
//   - Watch follows the keys through one watch, reopened where it left
//     off whenever it ends, and checks that it saw every event in revision
//     order, with no gap and no duplicate.
//   - Agreement asks every member for HashKV at one revision and for its
//     cluster ID: they must all agree.
//
// It is test code for the e2e scenarios and the soak. It imports etcd's
// client and porcupine, and nothing of this module: the caller hands it a
// way to dial, so it knows nothing of the harness or of TLS.
package history
