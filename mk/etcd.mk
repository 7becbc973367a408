# Pinned etcd server binaries for tests that run real etcd processes
# (internal/etcdtest). Include from the top-level Makefile, or run alone:
#
#   make -f mk/etcd.mk etcd-bins      # build whatever of $(ETCD_BINS) is missing
#   make -f mk/etcd.mk etcd-bin-3.4   # best effort: etcd 3.4 from Debian
#   make -f mk/etcd.mk etcd-clean     # remove what these rules produced
#   make -f mk/etcd.mk etcd-repin     # move each line to its newest patch release
#
# etcd's server module carries replace directives, so "go install
# go.etcd.io/etcd/server/v3@vX" is refused; each release is instead pinned by
# a small tools module under tools/ and built from there with "go build".
# The version variables below must match those go.mod files: the recipe
# checks, so a bumped go.mod without a bumped variable (or the reverse) fails
# loudly instead of producing a binary whose name lies about its version.

GO ?= go

# Paths are taken from this file's location so the fragment works both when
# included from the repository root and when run with -f from elsewhere.
ETCD_MK_ROOT := $(patsubst %/,%,$(dir $(abspath $(dir $(lastword $(MAKEFILE_LIST))))))
ETCD_BIN_DIR ?= $(ETCD_MK_ROOT)/bin

ETCD_35_VERSION ?= 3.5.35
ETCD_36_VERSION ?= 3.6.16
ETCD_37_VERSION ?= 3.7.3
# Debian bookworm's etcd-server package; not built here, see etcd-bin-3.4.
ETCD_34_VERSION ?= 3.4.23

ETCD_35_BIN := $(ETCD_BIN_DIR)/etcd-v$(ETCD_35_VERSION)
ETCD_36_BIN := $(ETCD_BIN_DIR)/etcd-v$(ETCD_36_VERSION)
ETCD_37_BIN := $(ETCD_BIN_DIR)/etcd-v$(ETCD_37_VERSION)
ETCD_34_BIN := $(ETCD_BIN_DIR)/etcd-v$(ETCD_34_VERSION)
ETCDCTL_35_BIN := $(ETCD_BIN_DIR)/etcdctl-v$(ETCD_35_VERSION)
ETCDCTL_36_BIN := $(ETCD_BIN_DIR)/etcdctl-v$(ETCD_36_VERSION)
ETCDCTL_37_BIN := $(ETCD_BIN_DIR)/etcdctl-v$(ETCD_37_VERSION)
# etcdutl checks and restores the snapshots the backup agent stores; the
# restore agent runs the cluster's own release of it, so both are tested.
ETCDUTL_35_BIN := $(ETCD_BIN_DIR)/etcdutl-v$(ETCD_35_VERSION)
ETCDUTL_36_BIN := $(ETCD_BIN_DIR)/etcdutl-v$(ETCD_36_VERSION)
ETCDUTL_37_BIN := $(ETCD_BIN_DIR)/etcdutl-v$(ETCD_37_VERSION)

ETCD_BINS := $(ETCD_35_BIN) $(ETCD_36_BIN) $(ETCD_37_BIN) \
	$(ETCDCTL_35_BIN) $(ETCDCTL_36_BIN) $(ETCDCTL_37_BIN) \
	$(ETCDUTL_35_BIN) $(ETCDUTL_36_BIN) $(ETCDUTL_37_BIN)

# CGO_ENABLED=0 matches etcd's release builds: a static binary that uses Go's
# own DNS resolver, so tests see the same name-resolution behaviour as
# production clusters. -trimpath keeps the binaries independent of where the
# module cache lives.
ETCD_GOBUILD = cd $(ETCD_MK_ROOT)/$(1) && \
	have=$$($(GO) list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3) && \
	if [ "$$have" != "v$(2)" ]; then \
		echo "etcd.mk: $(1)/go.mod pins server $$have but the version variable says v$(2)" >&2; \
		exit 1; \
	fi && \
	CGO_ENABLED=0 $(GO) build -trimpath -o $@.tmp $(3) && \
	mv -f $@.tmp $@

.PHONY: etcd-bins etcd-bin-3.4 etcd-clean etcd-repin

# etcd-repin moves every pinned line to the newest patch release the module
# proxy serves (CHECK=1: only report); see mk/etcd-repin.sh. The next
# etcd-bins builds the new binaries.
etcd-repin: ## move each pinned etcd line to its newest patch release (CHECK=1: only report)
	GO="$(GO)" $(ETCD_MK_ROOT)/mk/etcd-repin.sh

etcd-bins: $(ETCD_BINS)

# The go.mod/go.sum files are order-only: a binary named for its version is
# only ever missing, never stale, and touching go.mod (checkouts, a tidy) must
# not trigger a multi-minute rebuild.
$(ETCD_35_BIN): | $(ETCD_BIN_DIR) $(ETCD_MK_ROOT)/tools/etcd-v3.5/go.mod
	$(call ETCD_GOBUILD,tools/etcd-v3.5,$(ETCD_35_VERSION),go.etcd.io/etcd/server/v3)

$(ETCD_36_BIN): | $(ETCD_BIN_DIR) $(ETCD_MK_ROOT)/tools/etcd-v3.6/go.mod
	$(call ETCD_GOBUILD,tools/etcd-v3.6,$(ETCD_36_VERSION),go.etcd.io/etcd/server/v3)

$(ETCD_37_BIN): | $(ETCD_BIN_DIR) $(ETCD_MK_ROOT)/tools/etcd-v3.7/go.mod
	$(call ETCD_GOBUILD,tools/etcd-v3.7,$(ETCD_37_VERSION),go.etcd.io/etcd/server/v3)

$(ETCDCTL_35_BIN): | $(ETCD_BIN_DIR) $(ETCD_MK_ROOT)/tools/etcd-v3.5/go.mod
	$(call ETCD_GOBUILD,tools/etcd-v3.5,$(ETCD_35_VERSION),go.etcd.io/etcd/etcdctl/v3)

$(ETCDCTL_36_BIN): | $(ETCD_BIN_DIR) $(ETCD_MK_ROOT)/tools/etcd-v3.6/go.mod
	$(call ETCD_GOBUILD,tools/etcd-v3.6,$(ETCD_36_VERSION),go.etcd.io/etcd/etcdctl/v3)

$(ETCDCTL_37_BIN): | $(ETCD_BIN_DIR) $(ETCD_MK_ROOT)/tools/etcd-v3.7/go.mod
	$(call ETCD_GOBUILD,tools/etcd-v3.7,$(ETCD_37_VERSION),go.etcd.io/etcd/etcdctl/v3)

$(ETCDUTL_35_BIN): | $(ETCD_BIN_DIR) $(ETCD_MK_ROOT)/tools/etcd-v3.5/go.mod
	$(call ETCD_GOBUILD,tools/etcd-v3.5,$(ETCD_35_VERSION),go.etcd.io/etcd/etcdutl/v3)

$(ETCDUTL_36_BIN): | $(ETCD_BIN_DIR) $(ETCD_MK_ROOT)/tools/etcd-v3.6/go.mod
	$(call ETCD_GOBUILD,tools/etcd-v3.6,$(ETCD_36_VERSION),go.etcd.io/etcd/etcdutl/v3)

$(ETCDUTL_37_BIN): | $(ETCD_BIN_DIR) $(ETCD_MK_ROOT)/tools/etcd-v3.7/go.mod
	$(call ETCD_GOBUILD,tools/etcd-v3.7,$(ETCD_37_VERSION),go.etcd.io/etcd/etcdutl/v3)

$(ETCD_BIN_DIR):
	mkdir -p $@

# etcd 3.4 predates the split into go.etcd.io/etcd/server/v3 and friends, so
# it is not pinned like the others; Debian's build is used instead. The package is downloaded and unpacked rather than
# installed, because installing it starts a system etcd service (init.d) on
# the default ports. Never fails: apt or the network may be unavailable, and
# tests skip (or, with CI=true, fail) on a missing binary anyway.
etcd-bin-3.4:
	@if [ -x "$(ETCD_34_BIN)" ]; then exit 0; fi; \
	mkdir -p "$(ETCD_BIN_DIR)"; \
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT; \
	if command -v apt-get >/dev/null 2>&1 && \
		( cd "$$tmp" && apt-get download etcd-server >/dev/null 2>&1 || \
		  { apt-get update >/dev/null 2>&1 && cd "$$tmp" && apt-get download etcd-server >/dev/null 2>&1; } ) && \
		dpkg-deb -x "$$tmp"/etcd-server_*.deb "$$tmp/x" && \
		"$$tmp/x/usr/bin/etcd" --version 2>/dev/null | grep -q "^etcd Version: $(ETCD_34_VERSION)$$"; then \
		cp "$$tmp/x/usr/bin/etcd" "$(ETCD_34_BIN).tmp" && mv -f "$(ETCD_34_BIN).tmp" "$(ETCD_34_BIN)" && \
		echo "etcd.mk: installed $(ETCD_34_BIN) from Debian's etcd-server"; \
	else \
		echo "etcd.mk: warning: could not get etcd $(ETCD_34_VERSION) from Debian's etcd-server; tests needing it will skip" >&2; \
	fi

etcd-clean:
	rm -f $(ETCD_BINS) $(ETCD_34_BIN) $(addsuffix .tmp,$(ETCD_BINS) $(ETCD_34_BIN))
