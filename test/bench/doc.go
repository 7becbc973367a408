// Package bench measures what a sync costs, against a floor measured in the
// same run.
//
// The floor is an echo handler: it decodes the same request into the same
// types and encodes an answer of the same size, so it is what JSON over
// HTTP costs on this machine. The hook's steady-state sync does the same
// plus its reads of a real etcd cluster and its planning; the ratio between
// the two is the hook's own cost. Absolute figures are for context only:
// these machines are noisy, and only ratios from one run are compared.
//
// Each measurement runs for members serving plain HTTP and for members
// serving TLS with client-certificate auth (spec.TLS): the TLS request
// relates the cluster's three Secrets, as Metacontroller sends them, and
// its Pods are rendered by the planner (tls.go). The first sync on new
// connections, when every member is dialed (and, for TLS, a handshake made
// with each), is timed against a steady one in the same run (dials_test.go).
// The scale report (TestScaleReport, make bench-scale) runs the hook binary
// against a fleet whose etcd is simulated in the test process (etcdSim, one
// gRPC server telling thousands of members apart by the authority they are
// dialed at; TLS members over TLS with client-certificate auth), the member
// names resolved by the e2e harness's DNS, and a client that plays
// Metacontroller: syncs due round-robin at a steady rate, taken by a fixed
// number of workers, latency counted from due to done. Its shape comes from
// BENCH_SCALE_CLUSTERS, _WORKERS, _UNREACHABLE, _TLS_EVERY, _RATE, _ROUNDS,
// _REPLICAS, _PEERS and _COMPARE_TLS_EVERY (scaleShapeFromEnv); the
// defaults are the fleet-scale issue's: 10,000 clusters of 3 members, half
// of them TLS, 20 unreachable, a resync a minute, 16 workers, then 2
// replicas with --peers (_PEERS=0: without). Its
// phases: the healthy clusters alone, the unreachable ones interleaved, a
// few clusters whose endpoints fit the connections the hook keeps (the
// cost of dials), the hook's decode, plan and encode in this process (no
// network), and the replicas, each request to one at random (and
// forwarded by it to the cluster's owner). Each phase
// reads the hooks' and this process's CPU from /proc, and the machine's,
// so that the report says when the simulated side, not the hook, is the
// limit; the report sets every figure against the targets and
// works out what limits ten times the fleet (scale_report_test.go).
//
// It imports the packages it measures (hooks, reconcile, the planners,
// etcdclient, agent) and the test helpers (internal/testenv, etcdtest,
// s3test, tlstest, test/e2e/harness).
package bench
