// Package monitoring proves the monitoring objects of manifests/monitoring
// against the real things they name:
//
//   - the PrometheusRule's groups are kept, byte for byte, in the plain
//     rule file testdata/rules.yaml that promtool checks and unit-tests
//     (tests/*.yaml, "make test-monitoring"), and every alert has a firing
//     and a quiet case there, and a runbook_url naming its own section
//     of docs/alerts.md (test/docs checks that the section is there);
//   - every metric an alert or a dashboard query names is one the hook
//     registers (read from the server package's source) or one a real etcd
//     member serves on /metrics (etcd processes of each supported release,
//     started by internal/etcdtest), parsed by Prometheus's own PromQL
//     parser (bin/promql-metrics, built from tools/promtool);
//   - the Grafana dashboard parses, is templated on namespace and cluster,
//     and its ConfigMap carries exactly dashboard.json;
//   - the objects are valid under the schemas of the Prometheus Operator's
//     CRDs, as its release ships them (its Go module, from the Go module
//     proxy);
//   - the PodMonitor selects the labels and port the hook gives member
//     Pods, the ServiceMonitor the hook's Service and plain-HTTP port, and
//     no install of the operator includes them or makes them
//     Metacontroller children.
//
// Without bin/promql-metrics (built with make when missing), the etcd
// binaries or the Prometheus Operator's module the tests that need them
// skip, unless CI=true, where they fail.
//
// The tests import internal/testenv, internal/etcdtest (the real members
// whose series they read) and plan/etcdcluster (the names the hook gives
// Pods and ports), and nothing else of this module.
//
// Nothing but tests lives here; this file exists so that the package has a
// name outside its tests.
package monitoring
