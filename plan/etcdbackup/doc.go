// Package etcdbackup plans one Metacontroller sync of an EtcdBackup.
//
// Like the cluster's planner it is pure: given the EtcdBackup, its run
// Pods and the related objects the customize hook asked for (the S3
// Secret or the claim, the clientTLSSecret, the EtcdCluster it names), it
// returns the run Pod to keep or start, the status and when to look
// again. A run is one Pod of this project's image in backup mode; its
// outcome comes back as the Pod's termination message. The schedule is
// derived from the status alone, so a restarted hook, or one that was
// down, reaches the same decision: a missed period gives one run at once,
// never a burst.
//
// It may import api/v1beta2, plan, membership and agent/report, and
// Kubernetes' API types; never etcdclient, the agent, or a client of etcd,
// S3 or bbolt (test/purity_test.go checks it from go list -deps).
package etcdbackup
