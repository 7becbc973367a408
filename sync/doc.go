// Package sync plans one Metacontroller sync of an EtcdCluster.
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
package sync
