// Package etcdrestore plans one Metacontroller sync of an EtcdRestore.
//
// An EtcdRestore does nothing by itself: the EtcdCluster of the same name
// relates it (through its customize hook) and carries it out, and writes
// the outcome in its own status.restore (see the cluster planner's
// restore.go). This planner only checks the request early, so that a
// mistake is named on the object the user applied, and mirrors the
// cluster's account of the restore into the CoreOS status fields,
// succeeded and reason. It has no children and no side effects.
//
// It may import api/v1beta2, plan, membership and agent/report, and
// Kubernetes' API types; never etcdclient, the agent, or a client of etcd,
// S3 or bbolt (test/purity_test.go checks it from go list -deps).
package etcdrestore
