// Package plan is what every planner shares: the children of an answer
// (Child, the kinds, a child kept exactly as last applied), the rules of a
// customize hook's related objects, the addresses at which a cluster's
// members and client Service answer, and the check of a TLS Secret.
//
// It is a leaf under the planners plan/etcdcluster, plan/etcdbackup and
// plan/etcdrestore: it imports api/v1beta2, internal/pemcert and
// Kubernetes' API types only, and is pure (no I/O; the TLS check's memo
// is a cache of a pure function).
package plan
