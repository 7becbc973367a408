// Package s3test runs a real S3 server for tests: versitygw, built by
// "make bin/versitygw" from the Go module proxy, with its posix backend in
// a temporary directory, on loopback. It checks signatures as any S3
// store does, which an in-process fake would not.
package s3test
