package etcdcluster

import (
	"strconv"
	"strings"

	"github.com/etcdhook/etcd-hook/membership"
)

// semver is the part of an etcd version the hook reasons about.
type semver struct{ major, minor, patch int }

func parseVersion(v string) (semver, bool) {
	v = strings.TrimPrefix(v, "v")
	// Cut at the first '-' or '+' (a pre-release or build suffix), byte
	// by byte: neither byte occurs inside a multi-byte UTF-8 sequence.
	for i := 0; i < len(v); i++ {
		if v[i] == '-' || v[i] == '+' {
			v = v[:i]
			break
		}
	}
	// Exactly three dot-separated numbers, cut without allocating: the
	// planner parses versions many times a sync.
	var out [3]int
	for i := range out {
		part, rest, found := strings.Cut(v, ".")
		if found != (i < len(out)-1) || part == "" {
			// part == "": what Atoi refuses, without its error.
			return semver{}, false
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return semver{}, false
		}
		out[i], v = n, rest
	}
	return semver{out[0], out[1], out[2]}, true
}

func (a semver) less(b semver) bool {
	if a.major != b.major {
		return a.major < b.major
	}
	if a.minor != b.minor {
		return a.minor < b.minor
	}
	return a.patch < b.patch
}

// supportsLearners: learners (MemberAddAsLearner, MemberPromote) arrived
// in etcd 3.4.
func (a semver) supportsLearners() bool {
	return !a.less(semver{3, 4, 0})
}

// lowestVersion is the lowest version among the members, or "" when
// none is known. A member that answered counts with the version it
// reported. One that did not (restarting, cut off, not started yet) may run
// anything down to the lowest version last seen, so that version counts
// for it: a leader that misses one status read in the middle of an upgrade
// must not make the cluster look upgraded (status.currentVersion, which
// users and GitOps wait on, would say so while it still runs the old
// release), nor loosen the skew rule for the next change.
func (p *planner) lowestVersion() string {
	return lowestVersion(p.o.Membership, p.o.Cluster.Status.CurrentVersion)
}

func lowestVersion(ms *membership.Membership, lastSeen string) string {
	lowest, found := semver{}, ""
	consider := func(version string) {
		if v, ok := parseVersion(version); ok && (found == "" || v.less(lowest)) {
			lowest, found = v, version
		}
	}
	for _, m := range ms.Members {
		if m.Reachable {
			consider(m.Version)
		} else {
			consider(lastSeen)
		}
	}
	return found
}
