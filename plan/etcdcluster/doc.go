// Package etcdcluster plans one Metacontroller sync of an EtcdCluster.
//
// It is pure: given what was observed (the parent, its children, etcd's
// membership as read in this sync, and the clock) it returns the desired
// children, the status, and at most one membership action. It does no I/O,
// so every decision can be tested as a table, and a restarted hook reaches
// the same decision from the same observation: nothing is remembered
// between syncs.
//
// The caller performs the action and plans again with the membership the
// action returned, allowing no further action. That second plan is what the
// hook answers. This is how MemberAdd happens before the new member's Pod is
// in the answer, and MemberRemove before its Pod leaves it.
//
// A file is named after what it decides: bootstrap.go the first member and
// the bootstrap record, step.go the ladder that picks the one step of a
// sync, upgrade.go, downgrade.go and rollout.go the member-by-member
// changes, housekeeping.go compaction and defragmentation, restore*.go the
// cluster's side of a restore, health.go and status.go what the status
// says.
//
// It may import api/v1beta2, plan, membership and agent/report, and
// Kubernetes' API types; never etcdclient, the agent, or a client of etcd,
// S3 or bbolt (test/purity_test.go checks it from go list -deps).
package etcdcluster
