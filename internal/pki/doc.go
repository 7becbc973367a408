// Package pki is the certificate authority of spec.TLS.auto: it makes CAs,
// issues leaf certificates under them, and reads back what it made. It
// does no I/O and keeps nothing: the planner hands it what the request
// carried and renders what it returns as Secrets.
//
// Keys are ECDSA P-256: a key takes microseconds to make (an RSA key of
// 2048 bits takes tens of milliseconds, a lot inside a 10 s hook budget
// shared by a fleet), and every etcd release since 3.0 serves them.
//
// It imports only the standard library.
package pki
