// Package reconcile runs one sync against the world: it reads etcd's
// membership, asks the EtcdCluster planner (plan/etcdcluster) what to do,
// makes the one change the planner chose through etcdclient, and plans
// again with the result. That second plan is the hook's answer.
//
// Prepare may begin the read while the request is still being decoded;
// it returns an EarlyRead that the caller hands to Sync.
//
// It holds no state about clusters between syncs; the connections the
// etcd client keeps are a cost saving, not a memory of decisions.
package reconcile
