// Package membership is etcd's vocabulary as the hook uses it: a member
// and what it said about itself in this sync, the membership etcd
// reported, the actions a sync may take, etcd's alarms, and the quorum
// rules that decide whether a membership change is safe.
//
// The rules are pure functions, the way etcd's own membership package
// writes them: a change is allowed only if a quorum of the voting members
// is still up once it is made.
//
// It is a leaf: the planners and etcdclient import it, and it imports
// nothing of this module.
package membership
