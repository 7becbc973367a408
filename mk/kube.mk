# A real Kubernetes API server (and kubectl) for test/apiserver, which proves
# the manifests under manifests/ against it: install, admission, printer
# columns, no drift under GitOps. Include from the top-level Makefile, or run
# alone:
#
#   make -f mk/kube.mk kube-bins       # build whatever of $(KUBE_BINS) is missing
#   make -f mk/kube.mk test-apiserver  # kube-bins, then go test ./test/apiserver/
#   make -f mk/kube.mk kube-clean      # remove what these rules produced
#
# The binaries come from k8s.io/kubernetes at the release pinned by
# tools/kube/go.mod, whose replace block maps every k8s.io/<staging> module to
# its published v0.<minor>.<patch>. The first build takes minutes: 4 to 7 for
# kube-apiserver on 2 cores, then under a minute for kubectl, which reuses
# most of the build cache.
# The API server's store is etcd $(ETCD_36_VERSION) from mk/etcd.mk.
#
# The binaries are named without a version, so kube-bins checks what they
# report: a binary from another release (after a bump of tools/kube/go.mod
# and KUBE_VERSION) is removed and rebuilt. KUBE_VERSION must match
# tools/kube/go.mod: the recipe checks.

GO ?= go

KUBE_MK_ROOT := $(patsubst %/,%,$(dir $(abspath $(dir $(lastword $(MAKEFILE_LIST))))))
KUBE_BIN_DIR ?= $(KUBE_MK_ROOT)/bin

KUBE_VERSION ?= 1.36.3

KUBE_APISERVER_BIN := $(KUBE_BIN_DIR)/kube-apiserver
KUBECTL_BIN := $(KUBE_BIN_DIR)/kubectl
# kube-scheduler: test/apiserver places the member Pods the hook renders
# with the real scheduler, on Nodes made for the test.
KUBE_SCHEDULER_BIN := $(KUBE_BIN_DIR)/kube-scheduler
KUBE_BINS := $(KUBE_APISERVER_BIN) $(KUBECTL_BIN) $(KUBE_SCHEDULER_BIN)

# What Kubernetes' own release builds stamp (hack/lib/version.sh), so that
# "kubectl version" and the server's /version report the release instead of
# v0.0.0-master.
KUBE_VERSION_PKGS := k8s.io/component-base/version k8s.io/client-go/pkg/version
KUBE_LDFLAGS := -s -w $(foreach p,$(KUBE_VERSION_PKGS), \
	-X $(p).gitVersion=v$(KUBE_VERSION) \
	-X $(p).gitMajor=$(word 1,$(subst ., ,$(KUBE_VERSION))) \
	-X $(p).gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION))) \
	-X $(p).gitTreeState=clean)

# $(1): package of the command. CGO_ENABLED=0 as in Kubernetes' release
# builds of these two commands; built into a temporary name and renamed, so
# an interrupted build never leaves a binary that "only when missing" trusts.
KUBE_GOBUILD = cd $(KUBE_MK_ROOT)/tools/kube && \
	have=$$($(GO) list -m -f '{{.Version}}' k8s.io/kubernetes) && \
	if [ "$$have" != "v$(KUBE_VERSION)" ]; then \
		echo "kube.mk: tools/kube/go.mod pins k8s.io/kubernetes $$have but KUBE_VERSION says v$(KUBE_VERSION)" >&2; \
		exit 1; \
	fi && \
	echo "kube.mk: go build $(1) v$(KUBE_VERSION) -> $@ (the first build takes minutes)" && \
	start=$$(date +%s) && \
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(strip $(KUBE_LDFLAGS))' -o $@.tmp $(1) && \
	mv -f $@.tmp $@ && \
	echo "kube.mk: built $@ in $$(( $$(date +%s) - start ))s"

.PHONY: kube-bins kube-check-versions kube-clean test-apiserver

kube-bins: kube-check-versions ## build kube-apiserver, kubectl and kube-scheduler (KUBE_VERSION) into bin/, when missing
	@$(MAKE) -f $(KUBE_MK_ROOT)/mk/kube.mk KUBE_BIN_DIR=$(KUBE_BIN_DIR) KUBE_VERSION=$(KUBE_VERSION) \
		$(KUBE_BINS) $(ETCD_36_BIN)

# Removes a binary that reports another release than KUBE_VERSION.
kube-check-versions:
	@for b in $(KUBE_APISERVER_BIN):--version $(KUBECTL_BIN):"version --client" $(KUBE_SCHEDULER_BIN):--version; do \
		bin=$${b%%:*}; args=$${b#*:}; \
		[ -x "$$bin" ] || continue; \
		if ! "$$bin" $$args 2>/dev/null | grep -q "v$(KUBE_VERSION)\$$"; then \
			echo "kube.mk: $$bin is not v$(KUBE_VERSION); rebuilding it" >&2; rm -f "$$bin"; \
		fi; \
	done

# The manifests against a real API server (test/apiserver), once the
# binaries exist. "make test" runs it as its "apiserver" step.
test-apiserver: kube-bins build ## prove manifests/ against a real kube-apiserver (test/apiserver)
	cd $(KUBE_MK_ROOT) && $(GO) test ./test/apiserver/ -count=1 -v -timeout 5m

# tools/kube/go.mod is order-only: touching it (checkouts, a tidy) must not
# trigger a multi-minute rebuild; kube-check-versions catches a real bump.
$(KUBE_APISERVER_BIN): | $(KUBE_BIN_DIR) $(KUBE_MK_ROOT)/tools/kube/go.mod
	@$(call KUBE_GOBUILD,k8s.io/kubernetes/cmd/kube-apiserver)

$(KUBECTL_BIN): | $(KUBE_BIN_DIR) $(KUBE_MK_ROOT)/tools/kube/go.mod
	@$(call KUBE_GOBUILD,k8s.io/kubernetes/cmd/kubectl)

$(KUBE_SCHEDULER_BIN): | $(KUBE_BIN_DIR) $(KUBE_MK_ROOT)/tools/kube/go.mod
	@$(call KUBE_GOBUILD,k8s.io/kubernetes/cmd/kube-scheduler)

# The API server's etcd. mk/etcd.mk knows how to build it; when this file is
# run alone (make -f mk/kube.mk), it is included from there.
ifeq ($(ETCD_36_BIN),)
-include $(KUBE_MK_ROOT)/mk/etcd.mk
endif

ifeq ($(filter $(KUBE_BIN_DIR),$(ETCD_BIN_DIR) $(TOOLS_BIN_DIR) bin),)
$(KUBE_BIN_DIR):
	mkdir -p $@
endif

kube-clean:
	rm -f $(KUBE_BINS) $(addsuffix .tmp,$(KUBE_BINS))
