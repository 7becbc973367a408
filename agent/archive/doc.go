// Package archive is the layout of a continuous backup in a store: how
// full snapshots and deltas are named, encoded, sealed and chained, which
// objects a restore to a revision or a moment reads, and which retention
// deletes. It is pure: it reads listings and bytes, and never a store, so
// that the archiver and the restore (both in package agent) agree on one
// definition.
//
// # Layout
//
// Under a backup's key B (an S3 key, or a path on a volume):
//
//	B.pitr/<history>/snap-<revision>-<ms>[.zst][.sealed]
//	B.pitr/<history>/delta-<from>-<to>-<ms first>-<ms last>.zst[.sealed]
//
// A history is one etcd cluster, named by its cluster ID: revisions are
// compared within one only, since a restored or re-created cluster
// numbers them anew. A snapshot is named by the revision read from its own
// database (never by a read taken before or after it: gardener's #1044),
// and by when it was complete. A delta holds every revision from From to
// To, each with every event etcd made at it and the time the archiver
// received it: the commit happened no later. Numbers are zero-padded, so
// the store's listing is sorted by revision.
//
// # Two archivers at once: the layout makes a duplicate harmless
//
// Nothing claims a range before writing it. A claim needs a lease that
// expires, and a writer stalled past its lease still writes: the overlap
// of gardener's #1043 comes back through the claim. Conditional writes
// would do it, but not every S3-compatible store has them, and a volume
// is not S3. Instead:
//
//   - A delta is named by the exact revisions it holds, and revisions
//     within a history are etcd's own numbering: two archivers watching one
//     cluster write the same events under the same revisions, whatever
//     their cut points. Overlapping deltas are copies of one history, not
//     two histories.
//   - Each archiver writes its own run without a gap: it resumes from the
//     newest revision stored and then only from its own last delta. The
//     union of two runs has no gap either.
//   - A restore reads a path of deltas, each starting at or before the
//     revision after the one before it ends (Select), and replay skips a
//     revision it applied already, after checking that the copy holds the
//     same events: a duplicate that differs is detected, not replayed.
//
// # Encoding
//
// A delta is a small framed record format (delta.go), always compressed
// with zstd and checked end to end: cut short, reordered or changed, it
// does not decode. With a key, every object is sealed: AES-256-GCM in
// chunks (seal.go), bound to its name, so a flipped bit, a swapped chunk or
// a renamed object fails, and a wrong key is told apart. A snapshot with
// neither is the file etcd wrote, which etcdutl restores as it is.
//
// It imports the standard library and klauspost/compress only.
package archive
