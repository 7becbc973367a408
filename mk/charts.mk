# The Helm chart charts/etcd-hook, checked with a real Helm:
#
#   make bin/helm      # Helm v3, pinned by tools/helm/go.mod, built into bin/
#   make test-charts   # helm lint and helm template of every values variant,
#                      # then test/charts: no drift from kubectl kustomize
#
# Helm is built from the Go module proxy like the other tools (mk/tools.mk),
# with the ldflags of Helm's own release builds: its version, and the
# Kubernetes release its client-go speaks, which "helm template" and
# "helm lint" take as the cluster's version (.Capabilities.KubeVersion).
# Without them it reports "v3.21" and Kubernetes 1.20.
#
# bin/helm is built when missing. helm-check-version removes one that reports
# another release than tools/helm/go.mod pins (after a bump), so it is
# rebuilt. The Go tests in test/charts need bin/helm and bin/kubectl (mk/kube.mk):
# they are left out of "make unit", and skip without the binaries unless CI=true.

GO ?= go

HELM_BIN := bin/helm
CHART_DIR := charts/etcd-hook
HELM_TOOLS_DIR := tools/helm

# The values variants that are linted and rendered besides the defaults:
# HTTPS with a Secret of one's own, and with cert-manager issuing it.
CHART_TLS_SETS := --set tls.enabled=true
CHART_CERT_MANAGER_SETS := --set tls.enabled=true --set tls.certManager.enabled=true
# The Prometheus Operator's API, as a cluster that has it reports it; the
# monitoring objects are rendered only then.
CHART_MONITORING_API := --api-versions monitoring.coreos.com/v1

# Reads the pinned release from tools/helm/go.mod.
HELM_PINNED = $$(awk '$$1 == "require" && $$2 == "helm.sh/helm/v3" { print $$3 } $$1 == "helm.sh/helm/v3" { print $$2 }' $(abspath $(HELM_TOOLS_DIR))/go.mod)

.PHONY: helm helm-check-version test-charts chart-crds chart-monitoring

helm: helm-check-version ## build Helm (tools/helm/go.mod) into bin/helm, when missing
	@$(MAKE) $(HELM_BIN)

helm-check-version:
	@[ -x $(HELM_BIN) ] || exit 0; \
	want=$(HELM_PINNED); \
	if ! $(HELM_BIN) version --template '{{.Version}}' 2>/dev/null | grep -qx "$$want"; then \
		echo "charts.mk: $(HELM_BIN) is not $$want; rebuilding it" >&2; rm -f $(HELM_BIN); \
	fi

# go.mod is order-only, as for the other tools: rebuilt when missing, and
# helm-check-version catches a real bump.
$(HELM_BIN): | $(TOOLS_BIN_DIR) $(HELM_TOOLS_DIR)/go.mod
	@cd $(HELM_TOOLS_DIR) && \
	version=$(HELM_PINNED) && \
	k8s=$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go) && \
	k8s_minor=$$(echo "$$k8s" | cut -d. -f2) && \
	echo "charts.mk: go build helm $$version (Kubernetes 1.$$k8s_minor) -> $@" && \
	start=$$(date +%s) && \
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w \
		-X helm.sh/helm/v3/internal/version.version=$$version \
		-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
		-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
		-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$$k8s_minor \
		-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
		-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$$k8s_minor" \
		-o $(abspath $@).tmp helm.sh/helm/v3/cmd/helm && \
	mv -f $(abspath $@).tmp $(abspath $@) && \
	echo "charts.mk: built $@ in $$(( $$(date +%s) - start ))s"

# Lint (strict: a warning fails) and render each variant, so that a template
# error names its variant; then the Go tests, which compare what Helm renders
# with kubectl kustomize of manifests/ and check the values schema.
test-charts: helm $(KUBECTL_BIN) ## helm lint, helm template and the no-drift tests of charts/etcd-hook (test/charts)
	$(HELM_BIN) lint --strict $(CHART_DIR)
	$(HELM_BIN) lint --strict $(CHART_DIR) $(CHART_TLS_SETS)
	$(HELM_BIN) lint --strict $(CHART_DIR) $(CHART_CERT_MANAGER_SETS)
	$(HELM_BIN) template etcd-hook $(CHART_DIR) --include-crds >/dev/null
	$(HELM_BIN) template etcd-hook $(CHART_DIR) $(CHART_CERT_MANAGER_SETS) $(CHART_MONITORING_API) >/dev/null
	CI=true $(GO) test ./test/charts/ -count=1

# Helm reads nothing outside the chart, so the chart holds copies of the CRDs
# that controller-gen writes into manifests/crd (make manifests);
# test/charts fails when they differ.
chart-crds: ## copy manifests/crd/*.yaml into charts/etcd-hook/crds
	rm -f $(CHART_DIR)/crds/*.yaml
	cp manifests/crd/*.yaml $(CHART_DIR)/crds/

# The same for the monitoring objects of manifests/monitoring, which the
# chart renders from files/monitoring (the kustomization is not an object).
chart-monitoring: ## copy manifests/monitoring/*.yaml into charts/etcd-hook/files/monitoring
	rm -f $(CHART_DIR)/files/monitoring/*.yaml
	cp $(filter-out %/kustomization.yaml,$(wildcard manifests/monitoring/*.yaml)) $(CHART_DIR)/files/monitoring/

# test/apiserver installs the chart with bin/helm (TestChart): build it
# first. A prerequisite added here, so that mk/kube.mk stays usable alone.
test-apiserver: helm
