// Package agent is the work that runs inside Pods rather than in the hook:
// taking a snapshot of an etcd cluster and storing it ("etcd-hook backup"),
// and restoring one into a new cluster's seed member ("etcd-hook restore
// fetch" and "etcd-hook restore apply", its two init containers). They are
// modes of the same binary, so there is one image. The hook only decides
// and watches: a snapshot can take far longer than Metacontroller's 10 s
// hook timeout, and the hook never streams data.
//
// A run reports its outcome as one JSON document (report.BackupResult, report.RestoreResult),
// written to the container's termination message, which is how the hook
// learns it without talking to the store.
//
// It imports agent/report (the result contract), etcdclient and
// internal/pemcert, never a planner (test/layout holds it to that). Its
// tests run real etcd, S3 and TLS through internal/etcdtest, s3test,
// tlstest and testenv.
package agent
