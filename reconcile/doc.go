// Package reconcile runs one sync against the world: it reads etcd's
// membership, asks the planner in package sync what to do, makes the one
// membership change the planner chose, and plans again with the result.
//
// It holds no state about clusters between syncs; the connections the
// etcd client keeps are a cost saving, not a memory of decisions.
package reconcile
