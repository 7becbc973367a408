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
// A continuous backup (backupPolicy.deltaIntervalInSecond) is one
// long-running archiver Pod instead (archiver.go); the hook reads its
// status at the Pod's IP before planning, and hands it in as Observed's
// Archive, so the planner stays pure (archivestatus.go).
//
// It may import api/v1beta2, plan, membership and agent/report, and
// Kubernetes' API types; never etcdclient, the agent, or a client of etcd,
// S3 or bbolt (test/purity_test.go checks it from go list -deps).
package etcdbackup
