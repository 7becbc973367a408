// Package pemcert reads the leaf of a PEM certificate file, as the hook
// checks a TLS Secret and the backup agent checks its mounted files: the
// first CERTIFICATE block, whatever else the file holds (a chain, or a
// key before it).
package pemcert
