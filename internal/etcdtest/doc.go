// Package etcdtest runs real etcd server processes on loopback for tests.
//
// The hook's etcd client adapter is only as correct as its understanding of
// how etcd really behaves: which errors a learner returns, how long leader
// election takes after a member dies, what MemberList reports while a member
// is still joining, how /health differs between releases. A mock would encode
// our assumptions about those things and so could never disprove them, and an
// in-process embedded server would pin us to the single etcd version the root
// module imports. Real binaries of each supported release (built by
// mk/etcd.mk into bin/) let the same test run against every version the
// operator has to manage.
//
// Typical use, in a test of the adapter:
//
//	c := etcdtest.StartCluster(t, etcdtest.Options{Size: 3, Version: etcdtest.Version35})
//	cli := newClient(t, c.Endpoints())
//	peer := etcdtest.FreeURL(t)
//	_, err := cli.MemberAddAsLearner(ctx, []string{peer})
//	l := etcdtest.StartMember(t, etcdtest.MemberOptions{
//		Name: "learner", InitialCluster: c.InitialClusterWith("learner", peer),
//		Version: etcdtest.Version35,
//	})
//	c.Kill(0) // and so on; cleanup stops everything at the end of the test
//
// Binaries come from "make etcd-bins", found by internal/testenv (which
// skips the test without them, or fails it when CI=true); testenv also
// supervises each member's process and hands out its loopback ports.
//
// Everything here binds to 127.0.0.1 only, every wait is bounded, and only
// processes started by this package are ever signalled, by their pid.
//
// One file per concept: versions.go (the pinned releases), cluster.go
// (StartCluster), startmember.go (StartMember, a member joining a running
// cluster), member.go (one member's process), health.go (waiting for
// /health), cleanup.go (stopping followers before leaders), ports.go (loopback
// URLs), tls.go, dialer.go.
//
// It may import internal/testenv, internal/tlstest and etcdclient (whose
// dialer its TLS clusters are reached with), and nothing above them.
package etcdtest
