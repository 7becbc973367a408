// Package bench measures what a sync costs, against a floor measured in the
// same run.
//
// The floor is an echo handler: it decodes the same request into the same
// types and encodes an answer of the same size, so it is what JSON over
// HTTP costs on this machine. The hook's steady-state sync does the same
// plus its reads of a real etcd cluster and its planning; the ratio between
// the two is the hook's own cost. Absolute figures are for context only:
// these machines are noisy, and only ratios from one run are compared.
package bench
