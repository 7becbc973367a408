# etcd-hook: an etcd operator as a Metacontroller webhook.
#
# Run "make" (or "make help") for the list of targets. "make test" is what CI
# runs (.ci/run). Every tool used here is built into bin/ by this Makefile, so
# a fresh machine needs only Go, make and a POSIX shell.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

GO ?= go
# VCS stamping fails when .git is missing or owned by another user (CI
# checkouts, containers); nothing here needs it. Added to the GOFLAGS that go
# would use anyway (environment or "go env -w"), unless they say otherwise.
ifneq ($(origin GOFLAGS),command line)
GOFLAGS := $(strip $(shell $(GO) env GOFLAGS))
ifeq ($(findstring -buildvcs,$(GOFLAGS)),)
GOFLAGS += -buildvcs=false
endif
endif
export GOFLAGS

BIN_DIR := bin
HOOK_BIN := $(BIN_DIR)/etcd-hook
ADDR ?= 127.0.0.1:8080
IMAGE ?= ghcr.io/etcdhook/etcd-hook:latest
FUZZTIME ?= 10s
# The fuzz time "make test" uses: enough to catch regressions on the seeds.
CI_FUZZTIME ?= 5s
BENCHTIME ?= 1s

CRD_DIR := manifests/crd
CRD_PATHS := ./api/...

# Everything but the end-to-end tests, which need built binaries and run long.
# test/apiserver needs bin/kube-apiserver: its own step (mk/kube.mk).
# test/charts needs bin/helm and bin/kubectl: its own step (mk/charts.mk).
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e '/test/e2e' -e '/test/apiserver' -e '/test/charts' -e '/test/monitoring')
# Go files to format and check, outside bin/ and caches.
GO_FILES = $(shell find . \( -path ./bin -o -path ./.cache -o -path ./tmp -o -path ./.git \) -prune -o -name '*.go' -print)

include mk/tools.mk
# mk/etcd.mk defines etcd-bins (pinned etcd server binaries for the tests).
-include mk/etcd.mk
ifeq ($(wildcard mk/etcd.mk),)
.PHONY: etcd-bins
etcd-bins:
	@echo "mk/etcd.mk is missing: cannot build the etcd binaries the tests need" >&2; exit 1
endif
# mk/kube.mk defines kube-bins (kube-apiserver, kubectl) and test-apiserver.
-include mk/kube.mk
# mk/charts.mk defines test-charts (helm lint, helm template, no drift from
# manifests/); mk/monitoring.mk defines test-monitoring (promtool, dashboard).
include mk/charts.mk
include mk/monitoring.mk

.PHONY: help build run test unit e2e fuzz soak bench bench-quick bench-archive manifests verify-manifests fmt vet lint docker-build clean

help: ## list the targets
	@echo "Usage: make <target> [VAR=value]"
	@echo
	@grep -hE '^[a-zA-Z0-9_./-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN { FS = ":.*## " } { printf "  %-18s %s\n", $$1, $$2 }'
	@echo
	@echo "Variables: ADDR=$(ADDR) IMAGE=$(IMAGE) FUZZTIME=$(FUZZTIME) BENCHTIME=$(BENCHTIME)"

build: ## build bin/etcd-hook (static, CGO_ENABLED=0)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(HOOK_BIN) ./cmd/etcd-hook

run: build ## build and run the hook on ADDR (default 127.0.0.1:8080)
	$(HOOK_BIN) --addr $(ADDR)

# Steps run one after another (even under make -j), each announced, so a
# failure points at its step. make test is what CI runs, and must stay
# under 45 minutes on a fresh two-core machine (empty Go caches); make
# test-full adds what is left out of it for that: the monitoring objects
# and the e2e scenarios that repeat, on another path, a promise a kept
# scenario proves (the long tail: longTail in test/e2e names, for each,
# the scenario that proves its promise). Run make test-full before
# resolving an issue.
test: ## what CI runs: lint, CRD freshness, unit, e2e (one scenario per promise), apiserver, charts, fuzz (short)
	@$(MAKE) test-steps E2E=e2e
	@echo "==> test: all passed"

test-full: ## make test, plus the monitoring objects and every e2e scenario (the long tail)
	@$(MAKE) test-steps E2E=e2e-full MONITORING=test-monitoring
	@echo "==> test-full: all passed"

# The tools only the later steps need (kube-apiserver, kubectl,
# kube-scheduler, Helm, and
# promtool for the monitoring step) take about 9 minutes of a fresh
# machine's two cores to build, and the e2e step leaves those cores mostly
# idle while it waits on etcd. So they are built in the background while
# the e2e step runs, at the lowest CPU and I/O priority (nice 19, ionice
# idle), which takes what the scenarios leave; the apiserver step waits for
# them. Not from the first step on: lint and the unit tests keep both cores
# busy, so the build gained nothing there, and its disk writes (ionice is
# ignored by most I/O schedulers) slowed a defragmentation test past its
# wait. They are built by name, never through kube-bins, whose etcd the
# etcd-bins step builds in the foreground. The background build is its own
# process group (setsid), stopped with its go builds if a step fails.
BACKGROUND_TOOLS = $(KUBE_APISERVER_BIN) $(KUBECTL_BIN) $(KUBE_SCHEDULER_BIN) helm $(if $(MONITORING),promtool)
BACKGROUND_LOG := $(BIN_DIR)/.background-tools.log

.PHONY: test-full test-steps
test-steps:
	@mkdir -p $(BIN_DIR); \
	echo "==> lint";             $(MAKE) lint; \
	echo "==> verify-manifests"; $(MAKE) verify-manifests; \
	echo "==> etcd-bins";        $(MAKE) etcd-bins; \
	echo "==> unit";             $(MAKE) unit; \
	$(MAKE) $(E2E_DEPS); \
	echo "==> background: $(MAKE) kube-check-versions $(BACKGROUND_TOOLS) (nice 19, ionice idle; log: $(BACKGROUND_LOG))"; \
	setsid nice -n 19 ionice -c 3 $(MAKE) kube-check-versions $(BACKGROUND_TOOLS) </dev/null >$(BACKGROUND_LOG) 2>&1 & bg=$$!; \
	trap 'kill -- -$$bg 2>/dev/null || true' EXIT; \
	started=$$(date +%s); \
	echo "==> $(E2E)";           $(MAKE) $(E2E); \
	echo "==> background: waiting for the tools"; \
	waited=$$(date +%s); rc=0; wait $$bg || rc=$$?; trap - EXIT; \
	sed 's/^/    /' $(BACKGROUND_LOG); \
	if [ $$rc -ne 0 ]; then echo "background tool build failed (exit $$rc); its log is above" >&2; exit 1; fi; \
	echo "    waited $$(( $$(date +%s) - waited ))s for them, $$(( $$(date +%s) - started ))s after the e2e step began"; \
	echo "==> kube-bins";          $(MAKE) kube-bins; \
	echo "==> apiserver";          $(MAKE) test-apiserver; \
	echo "==> charts";             $(MAKE) test-charts; \
	$(if $(MONITORING),echo "==> monitoring"; $(MAKE) $(MONITORING);) \
	echo "==> fuzz";               $(MAKE) fuzz FUZZTIME=$(CI_FUZZTIME)

unit: $(CONTROLLER_GEN) $(VERSITYGW) ## unit tests: go test of every package but test/e2e
	$(GO) test -count=1 $(UNIT_PKGS)

E2E_DEPS = build etcd-bins etcd-bin-3.4 e2e-deps $(VERSITYGW)

e2e: $(E2E_DEPS) ## end-to-end tests, one scenario per promise (-short leaves out the long tail)
	$(GO) test ./test/e2e/... -short -count=1 -timeout 30m -v

.PHONY: e2e-full
e2e-full: $(E2E_DEPS) ## every end-to-end scenario, the long tail included
	$(GO) test ./test/e2e/... -count=1 -timeout 45m -v

# The chaos soak (test/e2e/soak_test.go): operations chosen at random from
# a seed for SOAK, invariants sampled all the while. make test runs it for
# 90 seconds, make test-full for two minutes; a failure prints SOAK_SEED,
# which replays the same choices.
SOAK ?= 30m
SOAK_TIMEOUT ?= 3h
.PHONY: soak
soak: $(E2E_DEPS) ## the chaos soak for SOAK (30m); SOAK_SEED=<seed> replays a run
	SOAK=$(SOAK) $(GO) test ./test/e2e -run '^TestSoak$$' -count=1 -v -timeout $(SOAK_TIMEOUT)

# The harness partitions a member with nftables (this kernel has no netem):
# Debian's nftables package, installed where missing. Root is required for
# the harness anyway (mount namespaces, DNS on port 53).
.PHONY: e2e-deps
e2e-deps:
	@command -v nft >/dev/null 2>&1 || { \
		echo "installing nftables (apt) for the e2e partition scenarios"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables >/dev/null; }

# Runs every Fuzz target of every package for FUZZTIME each. Packages are
# pre-filtered on "func Fuzz" in their test files so that only those are
# compiled for -list; test/e2e is left out (its TestMain may set up a world).
# Minimizing a new interesting input is bounded (100 runs): unbounded, it
# can outlast a short FUZZTIME, and the fuzzer then fails with "context
# deadline exceeded" although no input failed. Go's fuzzer still says that
# now and then when its deadline finds a worker mid-input (seen on
# FuzzHousekeeping, whose inputs run 100 syncs each): a run that says so and
# wrote no failing input (a real failure always does) is not counted as one.
fuzz: ## run each fuzz target for FUZZTIME (default 10s)
	@found=0; \
	pkgs=$$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}} {{.Dir}}{{end}}' ./...); \
	while read -r pkg dir; do \
		case "$$pkg" in ""|*/test/e2e|*/test/e2e/*) continue;; esac; \
		grep -qs '^func Fuzz' "$$dir"/*_test.go || continue; \
		list=$$($(GO) test -list '^Fuzz' "$$pkg" </dev/null); \
		for target in $$(echo "$$list" | grep '^Fuzz' || true); do \
			found=$$((found + 1)); \
			echo "--- fuzz $$pkg $$target ($(FUZZTIME))"; \
			rc=0; out=$$($(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=100x "$$pkg" </dev/null 2>&1) || rc=$$?; \
			echo "$$out"; \
			if [ $$rc -ne 0 ]; then \
				if echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
					echo "fuzz: $$target stopped on Go's own deadline while a worker was mid-input, with no failing input: not a failure"; \
				else exit 1; fi; \
			fi; \
		done; \
	done <<< "$$pkgs"; \
	if [ "$$found" -eq 0 ]; then echo "fuzz: no fuzz targets found"; fi

# The hook-cost table of BENCHMARKS.md: the hook against its echo floor,
# measured in one run with real etcd clusters of 1, 3, 5 and 7 members; then
# the Go benchmarks of the same pairs.
bench: build etcd-bins $(VERSITYGW) ## measure the hook against its floor (BENCHMARKS.md tables)
	BENCH_REPORT=1 BENCH_REPORT_FILE=$(BIN_DIR)/hook-cost.md BENCH_ISOLATION_FILE=$(BIN_DIR)/isolation.md BENCH_BACKUP_FILE=$(BIN_DIR)/backup.md \
		BENCH_ARCHIVE_FILE=$(BIN_DIR)/archive.md \
		$(GO) test ./test/bench -run '^Test(HookCost|UnreachableIsolation|BackupCost|ArchiveRPO)Report$$' -count=1 -v -timeout 25m
	$(GO) test ./test/bench ./plan/etcdcluster -run '^$$' -bench . -benchmem -benchtime=$(BENCHTIME) -count=1
	BENCH_REPORT=1 $(GO) test ./etcdclient -run '^TestConnectionCostReport$$' -count=1 -v
	BENCH_REPORT=1 $(BENCH_SCALE_1000) BENCH_SCALE_FILE=$(BIN_DIR)/scale-1000.md $(GO) test ./test/bench -run '^TestScaleReport$$' -count=1 -v -timeout 30m
	ETCDHOOK_E2E_REPORT=$(BIN_DIR)/convergence.md $(GO) test ./test/e2e/ -count=1 -timeout 15m -skip '^(TestRolloutSpecChange|TestNoClientReachesALearner|TestClusterOfAnEarlierReleaseIsAdopted)'
	BENCH_REPORT=1 BENCH_RESTORE_FILE=$(BIN_DIR)/restore.md $(GO) test ./test/e2e/ -run '^TestRestoreBenchReport$$' -count=1 -v -timeout 15m
	$(MAKE) --no-print-directory bench-rollout
	@echo "tables: $(BIN_DIR)/hook-cost.md $(BIN_DIR)/isolation.md $(BIN_DIR)/backup.md $(BIN_DIR)/scale-1000.md $(BIN_DIR)/convergence.md $(BIN_DIR)/restore.md $(BIN_DIR)/rollout.md (the 10,000-cluster run: make bench-scale)"

bench-quick: build etcd-bins ## a short hook-cost run, plain and TLS members, for CI-sized checks (about 2 minutes)
	BENCH_REPORT=1 BENCH_SAMPLES=300 BENCH_WINDOW_MS=500 $(GO) test ./test/bench -run '^TestHookCostReport$$' -count=1 -v -timeout 5m

# The backup agent against etcdctl snapshot save plus one upload, at two
# database sizes (bin/backup.md).
.PHONY: bench-backup
bench-backup: build etcd-bins $(VERSITYGW) ## the backup agent against its floor, 64 and 256 MiB (bin/backup.md)
	BENCH_REPORT=1 BENCH_BACKUP_FILE=$(BIN_DIR)/backup.md $(GO) test ./test/bench -run '^TestBackupCostReport$$' -count=1 -v -timeout 15m

# The continuous backup's stored lag (RPO) behind 1,000 and 5,000 puts/s,
# and the archiver's CPU and peak RSS (bin/archive.md).
bench-archive: build etcd-bins ## the archiver's RPO, CPU and memory at 1,000 and 5,000 puts/s (bin/archive.md)
	BENCH_REPORT=1 BENCH_ARCHIVE_FILE=$(BIN_DIR)/archive.md $(GO) test ./test/bench -run '^TestArchiveRPOReport$$' -count=1 -v -timeout 10m

# A restore of 256 MiB into 3 members, EtcdRestore to 3 ready, against the
# download, etcdutl restore and member starts of the same run (bin/restore.md).
.PHONY: bench-restore
bench-restore: build etcd-bins $(VERSITYGW) ## a 256 MiB restore, and one of 256 MiB + 100,000 changes from a chain, into 3 members against their floors (bin/restore.md)
	BENCH_REPORT=1 BENCH_RESTORE_FILE=$(BIN_DIR)/restore.md $(GO) test ./test/e2e/ -run '^Test(Chain)?RestoreBenchReport$$' -count=1 -v -timeout 30m

# The rolling spec changes (test/e2e/rollout_test.go), 3 and
# 5 members, on PVCs and on emptyDir, each against the restarts of the
# same run. make bench runs them here rather than in its e2e pass.
.PHONY: bench-rollout
bench-rollout: build etcd-bins ## rolling spec changes of 3 and 5 members against their restarts (bin/rollout.md)
	rm -f $(BIN_DIR)/rollout.md
	BENCH_REPORT=1 BENCH_ROLLOUT_FILE=$(BIN_DIR)/rollout.md $(GO) test ./test/e2e/ -run '^TestRolloutSpecChange' -count=1 -v -timeout 15m

# The scale benchmark (test/bench/scale_test.go): the hook binary serving a
# fleet of 3-member clusters whose etcd is simulated in the test process,
# synced round-robin at a steady rate by BENCH_SCALE_WORKERS workers, as
# Metacontroller does. The defaults are the fleet-scale issue's: 10,000
# clusters, every 2nd with spec.TLS, 20 unreachable ones spread through the
# round-robin, a resync of every cluster each minute (BENCH_SCALE_RATE
# empty: clusters/60 syncs per second), 16 workers (Metacontroller's default
# is 5: BENCH_SCALE_WORKERS=5), 1 round per phase, then 2 replicas with
# --peers (BENCH_SCALE_PEERS=0: without, each replica syncing whatever
# reaches it). Any of them can be set on the command line, e.g.
#   make bench-scale BENCH_SCALE_CLUSTERS=1000 BENCH_SCALE_WORKERS=5
BENCH_SCALE_CLUSTERS ?= 10000
BENCH_SCALE_WORKERS ?= 16
BENCH_SCALE_UNREACHABLE ?= 20
BENCH_SCALE_TLS_EVERY ?= 2
BENCH_SCALE_RATE ?=
BENCH_SCALE_ROUNDS ?= 1
BENCH_SCALE_REPLICAS ?= 2
BENCH_SCALE_PEERS ?= 1
BENCH_SCALE_TIMEOUT ?= 90m
# The 1000-cluster run of BENCHMARKS.md's "1000 clusters on one hook": 5
# workers, 5 unreachable, 50 syncs/s, 2 rounds, a plain fleet, then a second
# hook process with half of its clusters TLS; no replicas.
BENCH_SCALE_1000 := BENCH_SCALE_CLUSTERS=1000 BENCH_SCALE_WORKERS=5 BENCH_SCALE_UNREACHABLE=5 BENCH_SCALE_RATE=50 \
	BENCH_SCALE_TLS_EVERY=0 BENCH_SCALE_COMPARE_TLS_EVERY=2 BENCH_SCALE_ROUNDS=2 BENCH_SCALE_REPLICAS=1

.PHONY: bench-scale
bench-scale: build ## 10,000 clusters (half TLS, 20 unreachable, resync 60 s, 16 workers), then 2 replicas: targets, RSS, p99, CPU, dials, sizing (bin/scale.md; BENCH_SCALE_* to change, see Makefile)
	BENCH_REPORT=1 BENCH_SCALE_CLUSTERS=$(BENCH_SCALE_CLUSTERS) BENCH_SCALE_WORKERS=$(BENCH_SCALE_WORKERS) \
		BENCH_SCALE_UNREACHABLE=$(BENCH_SCALE_UNREACHABLE) BENCH_SCALE_TLS_EVERY=$(BENCH_SCALE_TLS_EVERY) \
		BENCH_SCALE_RATE=$(BENCH_SCALE_RATE) BENCH_SCALE_ROUNDS=$(BENCH_SCALE_ROUNDS) BENCH_SCALE_REPLICAS=$(BENCH_SCALE_REPLICAS) BENCH_SCALE_PEERS=$(BENCH_SCALE_PEERS) \
		BENCH_SCALE_FILE=$(BIN_DIR)/scale.md $(GO) test ./test/bench -run '^TestScaleReport$$' -count=1 -v -timeout $(BENCH_SCALE_TIMEOUT)

.PHONY: bench-scale-1000
bench-scale-1000: build ## the 1000-cluster run of BENCHMARKS.md: 5 workers, 5 unreachable, 50/s, then a half-TLS hook (bin/scale-1000.md)
	BENCH_REPORT=1 $(BENCH_SCALE_1000) BENCH_SCALE_FILE=$(BIN_DIR)/scale-1000.md $(GO) test ./test/bench -run '^TestScaleReport$$' -count=1 -v -timeout 30m

.PHONY: bench-scale-auto-tls
bench-scale-auto-tls: build ## bench-scale-1000 with the TLS clusters on the hook's own certificates (spec.TLS.auto; bin/scale-auto-tls.md)
	BENCH_REPORT=1 $(BENCH_SCALE_1000) BENCH_SCALE_TLS=auto BENCH_SCALE_FILE=$(BIN_DIR)/scale-auto-tls.md $(GO) test ./test/bench -run '^TestScaleReport$$' -count=1 -v -timeout 30m

manifests: $(CONTROLLER_GEN) ## regenerate the CRD under manifests/crd from api/ (and its copy in the Helm chart)
	$(CONTROLLER_GEN) crd paths=$(CRD_PATHS) output:crd:artifacts:config=$(CRD_DIR)
	@$(MAKE) chart-crds

verify-manifests: $(CONTROLLER_GEN) ## fail when the checked-in CRD differs from api/
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(CONTROLLER_GEN) crd paths=$(CRD_PATHS) output:crd:artifacts:config="$$tmp"; \
	if ! diff -ru "$(CRD_DIR)" "$$tmp"; then \
		echo "verify-manifests: $(CRD_DIR) is stale; run 'make manifests' and commit the result" >&2; \
		exit 1; \
	fi; \
	echo "verify-manifests: $(CRD_DIR) is up to date"

fmt: ## gofmt -w every Go file
	$(if $(GO_FILES),gofmt -w $(GO_FILES),@true)

vet: ## go vet ./...
	$(GO) vet ./...

lint: $(STATICCHECK) ## gofmt -l (must be empty), go vet, staticcheck
	@unformatted=$$(gofmt -l $(GO_FILES) </dev/null); \
	if [ -n "$$unformatted" ]; then \
		echo "lint: these files need gofmt (run 'make fmt'):" >&2; echo "$$unformatted" >&2; exit 1; \
	fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

docker-build: ## build the container image IMAGE (docker required)
	docker build -t $(IMAGE) .

clean: ## remove bin/etcd-hook and the tools (the etcd binaries stay: make etcd-clean)
	rm -f $(HOOK_BIN) $(HOOK_BIN).tmp
	rm -f $(TOOLS) $(addsuffix .tmp,$(TOOLS))
