// Package etcdclient is the hook's only door to etcd: it reads a cluster's
// membership and makes one membership change, through
// go.etcd.io/etcd/client/v3.
//
// Every call is bounded in time and takes the sync's context, so a cluster
// that does not answer costs one sync at most a few seconds and never holds
// one of Metacontroller's few workers for long. Clients are cached per
// cluster because dialing costs more than the reads a steady sync makes.
package etcdclient
