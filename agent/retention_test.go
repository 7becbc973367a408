package agent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestExpired(t *testing.T) {
	at := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
	k := func(rev int64, minutes int) string {
		return PeriodicKey("bucket-dir/etcd.backup", rev, at.Add(time.Duration(minutes)*time.Minute))
	}
	tests := []struct {
		name        string
		reason      string
		keys        []string
		keep        int
		justWritten string
		want        []string
	}{{
		name:   "revisions gain a digit",
		reason: "v10 is newer than v9 although it sorts first as a string (coreos/etcd-operator#2113)",
		keys:   []string{k(8, 0), k(9, 1), k(10, 2)}, keep: 2, justWritten: k(10, 2),
		want: []string{k(8, 0)},
	}, {
		name:   "same revision",
		reason: "with no write between two backups the later one is the newer",
		keys:   []string{k(5, 0), k(5, 1), k(5, 2)}, keep: 1, justWritten: k(5, 2),
		want: []string{k(5, 1), k(5, 0)},
	}, {
		name:   "the one just written stays",
		reason: "even if a clock or a restore makes it look older than the rest, the backup just written is kept",
		keys:   []string{k(100, 0), k(200, 1), k(3, 2)}, keep: 1, justWritten: k(3, 2),
		want: []string{k(200, 1), k(100, 0)},
	}, {
		name:   "unlimited",
		reason: "maxBackups 0 keeps everything",
		keys:   []string{k(1, 0), k(2, 1)}, keep: 0, justWritten: k(2, 1),
	}, {
		name:   "other objects untouched",
		reason: "the one-shot object at the key itself, and keys of other prefixes or shapes, are never deleted",
		keys: []string{"bucket-dir/etcd.backup", "bucket-dir/etcd.backup.old", "bucket-dir/etcd.backup_v1_junk",
			"bucket-dir/other_v1_2026-11-23-01:00:00", k(1, 0), k(2, 1)},
		keep: 1, justWritten: k(2, 1),
		want: []string{k(1, 0)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Expired("bucket-dir/etcd.backup", tt.keys, tt.keep, tt.justWritten)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("%s (-want +got):\n%s", tt.reason, d)
			}
		})
	}
}
