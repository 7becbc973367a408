// Command etcd-hook is the Metacontroller webhook that runs EtcdClusters.
//
// main only wires: flags, the router, the reconciler and its etcd client
// pool, the servers (plain HTTP, and HTTPS with a certificate reloaded on
// rotation: certreload.go), and a graceful shutdown on SIGTERM so that a
// sync in flight finishes (its membership step included) before the
// process exits.
//
// main may import every package it wires; its tests find their fixtures
// through internal/testenv.
package main
