package report

import "time"

// ArchiveStatus is what a continuous backup's archiver serves at
// ArchiveStatusPath while it runs: it never exits on its own, so it cannot
// report through a termination message. The hook reads it on each sync of
// the EtcdBackup, with a short timeout, and writes it to the status.
type ArchiveStatus struct {
	// History is the etcd cluster ID (hex) whose changes are archived.
	History string `json:"history,omitempty"`
	// ChainStart is the revision of the snapshot the current chain grows
	// from: the oldest revision a restore along it can reach without an
	// older snapshot.
	ChainStart int64 `json:"chainStart,omitempty"`
	// LastSnapshotRevision and LastSnapshotTime are the newest full
	// snapshot's, its revision read from the snapshot itself.
	LastSnapshotRevision int64      `json:"lastSnapshotRevision,omitempty"`
	LastSnapshotTime     *time.Time `json:"lastSnapshotTime,omitempty"`
	// LastDeltaRevision is the newest revision stored in a delta, and
	// LastDeltaTime when that delta was stored.
	LastDeltaRevision int64      `json:"lastDeltaRevision,omitempty"`
	LastDeltaTime     *time.Time `json:"lastDeltaTime,omitempty"`
	// ReceivedRevision is the newest revision the watch delivered.
	ReceivedRevision int64 `json:"receivedRevision,omitempty"`
	// OldestUnstored is when the oldest change not yet stored was first
	// known to exist: received by the watch, or seen by the archiver's
	// probe of the cluster's revision before the watch delivered it. Nil
	// when everything is stored. The RPO is its age.
	OldestUnstored *time.Time `json:"oldestUnstored,omitempty"`
	// ChainBreaks are the newest times the watch fell behind compaction and
	// a new chain began: the revisions in between are in no delta.
	ChainBreaks []ChainBreak `json:"chainBreaks,omitempty"`
	// LastError is the newest failure to reach etcd or the store, while it
	// lasts; "" once a later attempt succeeded.
	LastError string `json:"lastError,omitempty"`
	// Now is the archiver's clock when it answered, which the RPO is
	// computed against.
	Now time.Time `json:"now"`
}

// Chained says whether the archiver has its chain: a snapshot of the
// history it archives, found in the store or taken, to store deltas on.
func (s ArchiveStatus) Chained() bool { return s.History != "" && s.ChainStart > 0 }

// RPO is the age of the oldest change not yet stored, at Now.
func (s ArchiveStatus) RPO() time.Duration {
	if s.OldestUnstored == nil {
		return 0
	}
	return max(0, s.Now.Sub(*s.OldestUnstored))
}

// ChainBreak is one fall behind compaction: no delta holds the revisions
// From to To; the snapshot at To began the next chain.
type ChainBreak struct {
	At   time.Time `json:"at"`
	From int64     `json:"from"`
	To   int64     `json:"to"`
}

// ArchiveStatusPath is where the archiver serves its status, on
// ArchiveStatusPort.
const (
	ArchiveStatusPath = "/status"
	ArchiveStatusPort = 8080
	// ArchiveReadyPath answers 200 once the archiver has found (or begun)
	// its chain and watches, 503 before: its readiness probe.
	ArchiveReadyPath = "/readyz"
)
