package report

// ExitBackupUnusable is the exit code of a fetch whose backup cannot be
// restored however often it is retried: missing, unreadable with the given
// credentials, corrupt or truncated, not the expected one, or written by a
// newer etcd. Any other failure exits 1 and is worth a retry (the kubelet
// restarts the init container).
const ExitBackupUnusable = 3

// RestoreResult is what a restore step reports, as JSON in its termination
// message (at most 4096 bytes; the reason is shortened to fit). Apply fills
// only Succeeded, Reason, Source and AlreadyRestored.
type RestoreResult struct {
	Succeeded bool `json:"succeeded"`
	// Permanent says the backup itself is unusable (ExitBackupUnusable).
	Permanent bool   `json:"permanent"`
	Reason    string `json:"reason"`
	// Source is "s3://<bucket>/<key>" or the backup file's path.
	Source string `json:"source"`
	Size   int64  `json:"size"`
	// SHA256 is the hex sha256 of the whole snapshot, trailer included: what
	// our backups store with the object.
	SHA256 string `json:"sha256"`
	// Revision is the snapshot's store revision (before any bump).
	Revision int64 `json:"revision"`
	// EtcdVersion is the release that wrote the snapshot: "3.6.16" from our
	// backups' metadata, "3.6" from the database's storage version, or empty
	// for a snapshot of etcd 3.5 or older without metadata.
	EtcdVersion string `json:"etcdVersion"`
	// AlreadyRestored says the member's data dir already held a member:
	// nothing was fetched or changed.
	AlreadyRestored bool `json:"alreadyRestored"`
	// Of a restore from a continuous backup: the history (etcd cluster ID)
	// read, the deltas replayed after its snapshot, and the cluster's
	// HashKV checkpoints the replay matched. Revision is the revision
	// rebuilt.
	History string `json:"history,omitempty"`
	Deltas  int    `json:"deltas,omitempty"`
	Hashes  int    `json:"hashes,omitempty"`
}

// ExitCode is the step's exit code for r.
func (r RestoreResult) ExitCode() int {
	switch {
	case r.Succeeded:
		return 0
	case r.Permanent:
		return ExitBackupUnusable
	default:
		return 1
	}
}
