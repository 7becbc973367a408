// Package e2e runs the hook end to end: real etcd processes, the harness's
// kubelet and Metacontroller (test/e2e/harness), and the hook binary built
// from cmd/etcd-hook. Each scenario proves one promise the documentation makes
// (no acknowledged write lost, no silent re-bootstrap, one member out at a
// time, …) at the level where it can break.
//
// "make test" runs one scenario per promise (-short); "make test-full"
// runs the long tail too.
//
// It imports test/e2e/harness and internal/testenv; its tests add the
// other test helpers (internal/etcdtest, s3test, tlstest, gitopstest) and
// plan/etcdcluster for the names the hook renders. The hook itself is only
// ever the binary.
package e2e
