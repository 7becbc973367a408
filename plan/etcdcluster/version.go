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

// lowestVersion is the lowest parseable version among the members that
// answered, or "" when none did.
func lowestVersion(ms *membership.Membership) string {
	lowest, found := semver{}, ""
	for _, m := range ms.Members {
		if !m.Reachable {
			continue
		}
		v, ok := parseVersion(m.Version)
		if !ok {
			continue
		}
		if found == "" || v.less(lowest) {
			lowest, found = v, m.Version
		}
	}
	return found
}
