package report

import "time"

// BackupResult is what a backup run reports, as JSON in the termination message. It
// stays well under the kubelet's 4096-byte limit.
type BackupResult struct {
	Succeeded    bool   `json:"succeeded"`
	Reason       string `json:"reason,omitempty"`
	EtcdVersion  string `json:"etcdVersion,omitempty"`
	EtcdRevision int64  `json:"etcdRevision,omitempty"`
	ClusterID    string `json:"clusterID,omitempty"`
	// Member is the endpoint the snapshot was taken from.
	Member   string    `json:"member,omitempty"`
	Location string    `json:"location,omitempty"`
	Size     int64     `json:"size,omitempty"`
	SHA256   string    `json:"sha256,omitempty"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	// Pruned counts the older backups retention deleted.
	Pruned int `json:"pruned,omitempty"`
}
