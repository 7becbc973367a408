// Package e2e runs the hook end to end: real etcd processes, the harness's
// kubelet and Metacontroller (test/e2e/harness), and the hook binary built
// from cmd/etcd-hook. Each scenario proves one promise the documentation makes
// (no acknowledged write lost, no silent re-bootstrap, one member out at a
// time, …) at the level where it can break.
//
// "make test" runs one scenario per promise (-short); "make test-full"
// runs the long tail too.
//
// Beside every step's writer runs the checker (checker_test.go, with
// test/e2e/history): linearizable histories, complete watches, members
// that agree. soak_test.go is the chaos soak ("make soak"); and
// operatorupgrade_test.go replaces the hook of an earlier commit, built
// from the repository's history, by the current one.
//
// It imports test/e2e/harness, test/e2e/history and internal/testenv; its
// tests add the
// other test helpers (internal/etcdtest, s3test, tlstest, gitopstest) and
// plan/etcdcluster for the names the hook renders. The hook itself is only
// ever the binary.
package e2e
