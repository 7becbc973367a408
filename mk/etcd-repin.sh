#!/bin/sh
# Moves each pinned etcd release line (one tools/etcd-v3.N module each) to
# the newest patch release the Go module proxy serves, as the release
# tooling of etcd's own projects re-pins its acceptance tests: the tools
# module (server, etcdctl, etcdutl), mk/etcd.mk's version variable and
# internal/etcdtest's constant move together (a test checks that they
# agree). What else names the old release is listed, not rewritten: the
# default version and examples are decisions, not bookkeeping.
#
#   mk/etcd-repin.sh          re-pin
#   CHECK=1 mk/etcd-repin.sh  only say what would move
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
for dir in "$root"/tools/etcd-v3.*; do
	line=${dir##*etcd-v}
	major=${line%%.*}
	minor=${line#*.}
	var="ETCD_${major}${minor}_VERSION"
	old=$(sed -n "s/^$var ?= *//p" "$root/mk/etcd.mk")
	newest=$(cd "$dir" && $GO list -m -versions go.etcd.io/etcd/server/v3 | tr ' ' '\n' |
		grep -E "^v$major\.$minor\.[0-9]+$" | sort -V | tail -n 1)
	if [ -z "$newest" ]; then
		echo "etcd-repin: the module proxy lists no release of $line" >&2
		exit 1
	fi
	new=${newest#v}
	if [ "$old" = "$new" ]; then
		echo "$line: $old is the newest"
		continue
	fi
	echo "$line: $old -> $new"
	if [ "${CHECK:-}" = 1 ]; then
		continue
	fi
	(cd "$dir" && $GO get "go.etcd.io/etcd/server/v3@$newest" "go.etcd.io/etcd/etcdctl/v3@$newest" \
		"go.etcd.io/etcd/etcdutl/v3@$newest" && $GO mod tidy)
	sed -i "s/^$var ?= .*/$var ?= $new/" "$root/mk/etcd.mk"
	sed -i "s/^\([[:space:]]*Version$major$minor = \)\"[^\"]*\"/\1\"$new\"/" "$root/internal/etcdtest/binary.go"
	echo "  still naming $old (update by hand where it should move):"
	grep -rlF --exclude-dir=bin --exclude-dir=.git --exclude-dir=tools "$old" "$root" | sed "s|^$root/|    |" || true
done
