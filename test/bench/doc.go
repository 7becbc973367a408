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
// The scale report runs a second hook process whose fleet has TLS clusters
// among the plain ones, served by etcdSim over TLS.
//
// It imports the packages it measures (hooks, reconcile, the planners,
// etcdclient, agent) and the test helpers (internal/testenv, etcdtest,
// s3test, tlstest, test/e2e/harness).
package bench
