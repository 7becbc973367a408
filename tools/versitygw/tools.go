//go:build tools

// Package tools pins versitygw, the S3 server the backup tests store
// snapshots in (posix backend, on loopback).
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
