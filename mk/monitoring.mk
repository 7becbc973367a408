# The monitoring objects of manifests/monitoring, checked with a real
# promtool:
#
#   make bin/promtool        # promtool, pinned by tools/promtool/go.mod
#   make bin/promql-metrics  # the PromQL parser of the same release, as a
#                            # command that names the metrics of expressions
#   make test-monitoring     # the Go tests of test/monitoring, then
#                            # promtool check rules and promtool test rules
#
# promtool is built from the Go module proxy like the other tools
# (mk/tools.mk), with its version stamped in as Prometheus's release builds
# do. The Prometheus module is large: the first build took 6 to 9 minutes
# and 3 GiB of memory on 2 shared cores (then about 20 s, from the build
# cache); it is built only when missing, and
# promtool-check-version removes one that reports another release than
# tools/promtool/go.mod pins (after a bump).
#
# promtool wants plain rule files, not a PrometheusRule: the Go tests keep
# test/monitoring/testdata/rules.yaml identical to the PrometheusRule's
# spec (go test ./test/monitoring -run TestRulesFile -update rewrites it),
# and run first so that promtool never checks a stale copy.

GO ?= go

PROMTOOL_BIN := bin/promtool
PROMQL_METRICS_BIN := bin/promql-metrics
PROMTOOL_TOOLS_DIR := tools/promtool
MONITORING_TEST_DIR := test/monitoring

# The Prometheus module's version v0.3XY.Z is Prometheus 3.XY.Z.
PROMTOOL_MODULE_VERSION = $$(awk '$$1 == "require" && $$2 == "github.com/prometheus/prometheus" { print $$3 } $$1 == "github.com/prometheus/prometheus" { print $$2 }' $(abspath $(PROMTOOL_TOOLS_DIR))/go.mod)
PROMTOOL_PINNED = $$(echo $(PROMTOOL_MODULE_VERSION) | awk -F. '{ sub(/^v/, "", $$1); printf "%d.%d.%s", int($$2 / 100), $$2 % 100, $$3 }')

.PHONY: promtool promtool-check-version test-monitoring

promtool: promtool-check-version ## build promtool (tools/promtool/go.mod) into bin/promtool, when missing
	@$(MAKE) $(PROMTOOL_BIN)

promtool-check-version:
	@[ -x $(PROMTOOL_BIN) ] || exit 0; \
	want=$(PROMTOOL_PINNED); \
	if ! $(PROMTOOL_BIN) --version 2>/dev/null | head -n 1 | grep -q "version $$want "; then \
		echo "monitoring.mk: $(PROMTOOL_BIN) is not $$want; rebuilding it" >&2; \
		rm -f $(PROMTOOL_BIN) $(PROMQL_METRICS_BIN); \
	fi

# go.mod is order-only, as for the other tools: rebuilt when missing, and
# promtool-check-version catches a real bump.
$(PROMTOOL_BIN): | $(TOOLS_BIN_DIR) $(PROMTOOL_TOOLS_DIR)/go.mod
	@cd $(PROMTOOL_TOOLS_DIR) && \
	version=$(PROMTOOL_PINNED) && \
	echo "monitoring.mk: go build promtool $$version -> $@ (the first build takes minutes)" && \
	start=$$(date +%s) && \
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w \
		-X github.com/prometheus/common/version.Version=$$version \
		-X github.com/prometheus/common/version.Branch=v$$version" \
		-o $(abspath $@).tmp github.com/prometheus/prometheus/cmd/promtool && \
	mv -f $(abspath $@).tmp $(abspath $@) && \
	echo "monitoring.mk: built $@ in $$(( $$(date +%s) - start ))s"

$(PROMQL_METRICS_BIN): | $(TOOLS_BIN_DIR) $(PROMTOOL_TOOLS_DIR)/go.mod
	$(call TOOLS_GOBUILD,$(PROMTOOL_TOOLS_DIR),./promqlmetrics)

# The Go tests need the etcd binaries (they read a real etcd's /metrics) and
# bin/promql-metrics; CI=true makes a missing one a failure, not a skip.
test-monitoring: promtool $(PROMQL_METRICS_BIN) etcd-bins ## the monitoring objects: Go tests (rules copy, metric names, dashboard), promtool check rules and test rules
	CI=true $(GO) test ./$(MONITORING_TEST_DIR)/ -count=1
	$(PROMTOOL_BIN) check rules $(MONITORING_TEST_DIR)/testdata/rules.yaml
	$(PROMTOOL_BIN) test rules $(MONITORING_TEST_DIR)/tests/*.yaml
