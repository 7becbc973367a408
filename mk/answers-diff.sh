#!/usr/bin/env bash
# answers-diff.sh BASE: build the hook at git revision BASE and from the
# working tree, post every request under test/fixtures/ to both, and diff
# their answers. A refactoring that claims to change no behaviour shows it
# here: the answers to every fixture (and to the captured Metacontroller
# requests in ../shared), HTTP status included, are identical.
#
# Answers carry the time of the sync (conditions' lastTransitionTime, run
# records), so RFC 3339 timestamps are masked before the comparison; every
# other byte must match. Exits 1 on any difference.
set -euo pipefail

base=${1:?usage: mk/answers-diff.sh <git revision>}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	git -C "$root" worktree remove --force "$work/old" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

git -C "$root" worktree add --quiet --detach "$work/old" "$base"
# The entry point moved from ./server to ./cmd/etcd-hook; build whichever
# the revision has.
main=./cmd/etcd-hook
[ -d "$work/old/cmd/etcd-hook" ] || main=./server
(cd "$work/old" && CGO_ENABLED=0 go build -o "$work/old.bin" "$main")
(cd "$root" && CGO_ENABLED=0 go build -o "$work/new.bin" ./cmd/etcd-hook)

# free_port asks the kernel for an unused loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() { # start NAME: runs $work/NAME.bin, prints its address
	local port
	port=$(free_port)
	"$work/$1.bin" --addr "127.0.0.1:$port" --log-level error >"$work/$1.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && { echo "127.0.0.1:$port"; return; }
		sleep 0.1
	done
	echo "the $1 hook did not start; its log:" >&2
	cat "$work/$1.log" >&2
	exit 1
}
old=$(start old)
new=$(start new)

# route: the hook path a request is posted to, by its file name: backup-*
# to the EtcdBackup hooks, *customize* to a customize hook, finalize-* to a
# finalize hook, anything else to the EtcdCluster sync (wrong-kind.json
# included: that is its point).
route() {
	local name prefix=""
	name=$(basename "$1")
	case $name in backup-*) prefix=/backup ;; restore-*) prefix=/restore ;; esac
	case $name in
	*customize*) echo "$prefix/customize" ;;
	finalize-*) echo "$prefix/finalize" ;;
	*) echo "$prefix/sync" ;;
	esac
}

mask='s/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})/<time>/g'
differ=0 n=0
# The fixtures, and the requests captured from a real Metacontroller when
# ../shared is beside the repository.
requests=("$root"/test/fixtures/*.json)
for f in "$root"/../shared/metacontroller/captured/*.request.json; do
	[ -e "$f" ] && requests+=("$f")
done
for f in "${requests[@]}"; do
	path=$(route "$f")
	for side in old new; do
		addr=${!side}
		curl -s -o "$work/$side.body" -w '%{http_code}\n' -XPOST "http://$addr$path" \
			-H 'Content-Type: application/json' --data-binary @"$f" >"$work/$side.answer"
		sed -E "$mask" "$work/$side.body" >>"$work/$side.answer"
	done
	n=$((n + 1))
	if ! diff -u --label "$base $path" --label "working tree $path" "$work/old.answer" "$work/new.answer"; then
		echo "differs: $(basename "$f")" >&2
		differ=$((differ + 1))
	else
		echo "same: $(basename "$f") ($path, HTTP $(head -1 "$work/new.answer"), $(wc -c <"$work/new.body") bytes)"
	fi
done
echo "$n requests, $differ answers differ"
[ "$differ" -eq 0 ]
