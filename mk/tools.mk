# Developer tools, each pinned by a small module under tools/ and built into
# bin/ with "go build" from that module, so a fresh machine needs nothing but
# Go. Included from the top-level Makefile; paths are relative to the
# repository root, where make runs (make -C <root> works too).
#
#   make bin/controller-gen   # generates the CRD (make manifests)
#   make bin/staticcheck      # used by make lint
#   make bin/versitygw        # the S3 server of the backup tests
#
# Each binary is built only when missing. After bumping a version in
# tools/<tool>/go.mod, delete the binary (or run make clean) to rebuild it.

GO ?= go

TOOLS_BIN_DIR := bin
CONTROLLER_GEN := $(TOOLS_BIN_DIR)/controller-gen
STATICCHECK := $(TOOLS_BIN_DIR)/staticcheck
# versitygw is the S3 server the backup tests store snapshots in.
VERSITYGW := $(TOOLS_BIN_DIR)/versitygw
TOOLS := $(CONTROLLER_GEN) $(STATICCHECK) $(VERSITYGW)

# $(1): directory of the tools module, $(2): package of the command.
# Built into a temporary name and renamed, so an interrupted build never
# leaves a half-written binary that "only when missing" would then trust.
TOOLS_GOBUILD = cd $(1) && $(GO) build -trimpath -o $(abspath $@).tmp $(2) && mv -f $(abspath $@).tmp $(abspath $@)

.PHONY: tools tools-clean

tools: $(TOOLS) ## build the pinned developer tools into bin/

# go.mod is order-only: the binary is rebuilt when missing, not when go.mod
# is merely newer (checkouts touch it).
$(CONTROLLER_GEN): | $(TOOLS_BIN_DIR) tools/controller-gen/go.mod
	$(call TOOLS_GOBUILD,tools/controller-gen,sigs.k8s.io/controller-tools/cmd/controller-gen)

$(STATICCHECK): | $(TOOLS_BIN_DIR) tools/staticcheck/go.mod
	$(call TOOLS_GOBUILD,tools/staticcheck,honnef.co/go/tools/cmd/staticcheck)

$(VERSITYGW): | $(TOOLS_BIN_DIR) tools/versitygw/go.mod
	$(call TOOLS_GOBUILD,tools/versitygw,github.com/versity/versitygw/cmd/versitygw)

$(TOOLS_BIN_DIR):
	mkdir -p $@

tools-clean:
	rm -f $(TOOLS) $(addsuffix .tmp,$(TOOLS))
