// Package etcdclient is the hook's only door to etcd: it reads a cluster's
// membership and makes one membership change, through
// go.etcd.io/etcd/client/v3's cluster and maintenance APIs.
//
// Every call is bounded in time and takes the sync's context, so a cluster
// that does not answer costs one sync at most a few seconds and never holds
// one of Metacontroller's few workers for long.
//
// A steady sync reads in one round trip: every member's status, and one
// member's local copy of the member list. A sync that may change something
// confirms the list through the quorum first (Cluster.Confirm).
//
// Connections are shared by endpoint across clusters and kept between
// syncs, because dialing costs more than a steady sync's reads; at most a
// bounded number stay open while idle, so that a hook serving a thousand
// clusters does not hold three thousand. Each is one HTTP/2 connection that
// carries etcd's unary gRPC calls (memberConn, h2conn): a hook serving a
// large fleet dials most members on every sync, and a grpc-go connection
// costs twice as much to dial and five goroutines to keep.
//
// It speaks membership's vocabulary (Member, Membership, Action) and never
// imports a planner.
package etcdclient
