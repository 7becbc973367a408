package agent

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// Periodic backups are named as the CoreOS backup operator named them,
// "<key>_v<revision>_<time>", so existing buckets keep their order; they
// are ordered by the numbers in the name, never by the name itself. (The
// CoreOS operator sorted names as strings and deleted its newest backup
// once revisions gained a digit: coreos/etcd-operator#2113.)
const timeLayout = "2006-01-02-15:04:05"

// PeriodicKey is the name of a periodic backup.
func PeriodicKey(key string, revision int64, at time.Time) string {
	return fmt.Sprintf("%s_v%d_%s", key, revision, at.UTC().Format(timeLayout))
}

var periodicName = regexp.MustCompile(`_v([0-9]+)_([0-9]{4}-[0-9]{2}-[0-9]{2}-[0-9]{2}:[0-9]{2}:[0-9]{2})$`)

// backupName is a periodic backup's place in the order.
type backupName struct {
	key      string
	revision int64
	at       time.Time
}

func parseBackupName(base, key string) (backupName, bool) {
	if len(key) <= len(base) || key[:len(base)] != base {
		return backupName{}, false
	}
	m := periodicName.FindStringSubmatch(key[len(base):])
	if m == nil || len(m[0]) != len(key)-len(base) {
		return backupName{}, false
	}
	rev, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return backupName{}, false
	}
	at, err := time.Parse(timeLayout, m[2])
	if err != nil {
		return backupName{}, false
	}
	return backupName{key: key, revision: rev, at: at}, true
}

// Expired lists the periodic backups of base to delete so that the newest
// keep remain, newest by revision and then by time. The backup just
// written is never among them, and keys that are not periodic backups of
// base are never touched. keep <= 0 keeps everything.
func Expired(base string, keys []string, keep int, justWritten string) []string {
	if keep <= 0 {
		return nil
	}
	var names []backupName
	for _, k := range keys {
		if n, ok := parseBackupName(base, k); ok {
			names = append(names, n)
		}
	}
	sort.SliceStable(names, func(i, j int) bool {
		if names[i].revision != names[j].revision {
			return names[i].revision > names[j].revision
		}
		return names[i].at.After(names[j].at)
	})
	// The backup just written takes the first place, whatever its name.
	kept := 0
	for _, n := range names {
		if n.key == justWritten {
			kept = 1
		}
	}
	var out []string
	for _, n := range names {
		if n.key == justWritten {
			continue
		}
		if kept < keep {
			kept++
			continue
		}
		out = append(out, n.key)
	}
	return out
}
