// Package tlstest issues the certificates tests run TLS etcd clusters and
// hooks with: a CA per test, and leaves named the way docs/tls.md tells
// users to name theirs. Keys are ECDSA P-256, so a test issues dozens in
// milliseconds.
package tlstest
