//go:build tools

// Package tools pins an etcd server release so that its binary can be built
// with "go build" from this module: "go install pkg@version" refuses etcd's
// server module because its go.mod carries replace directives.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
