// Package s3test runs a real S3 server for tests: versitygw, built by
// "make bin/versitygw" from the Go module proxy, with its posix backend in
// a temporary directory, on loopback. It checks signatures as any S3
// store does, which an in-process fake would not.
//
// It finds the binary, a port and its process supervisor in
// internal/testenv, and imports nothing else of this module.
package s3test
