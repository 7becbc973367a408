// Package charts proves the Helm chart charts/etcd-hook with a real Helm
// (bin/helm, built by mk/charts.mk from tools/helm/go.mod) and a real
// kustomize (kubectl kustomize of bin/kubectl, mk/kube.mk): the chart with
// its default values renders the same objects as manifests/, its HTTPS
// values the same as manifests/tls and manifests/tls/cert-manager, its
// copies of the CRDs and of the monitoring objects are those of manifests/,
// the monitoring objects appear only where the Prometheus Operator's API
// is served, each value does what values.yaml says, the schema refuses
// what it should, and every value is documented.
//
// "make test-charts" runs it after building the binaries. It is left out
// of "make unit", which builds neither; without them the tests skip, unless
// CI=true, where a missing binary fails them. The chart's install on a
// real API server is in test/apiserver (chart_test.go).
//
// The tests import internal/testenv (bin/helm, bin/kubectl, the module
// root, the CI-or-skip rule) and nothing else of this module: the chart is
// checked as Helm and kubectl see it.
//
// Nothing but tests lives here; this file exists so that the package has a
// name outside its tests.
package charts
