// Package testenv is the one place tests learn about the machine they run
// on: where the module root is, where the built binaries are, where the
// shared recordings beside the repository are, how a process they start is
// supervised, and what a missing prerequisite means.
//
// The rule for a missing prerequisite (a binary "make" did not build yet, the
// e2e sandbox, nft, ../shared) is SkipOrFail: the test is skipped on a
// developer's machine, where not having run make is normal, and fails when
// CI=true, where it means the CI script forgot to provide it and the suite
// would otherwise pass while testing nothing. The message always says how to
// get the missing piece ("run make etcd-bins").
//
// # Environment
//
// Every variable that moves what testenv finds is read here and nowhere else:
//
//	CI=true              a missing prerequisite fails the test instead of skipping it
//	ETCDHOOK_ROOT        the module root [the directory of the go.mod of
//	                     github.com/etcdhook/etcd-hook above the working directory]
//	ETCDHOOK_BIN_DIR     the built binaries: etcd-v<version>, etcdctl-v<version>,
//	                     etcdutl-v<version>, etcd-hook, kube-apiserver, kubectl,
//	                     helm, versitygw, controller-gen, promtool,
//	                     promql-metrics [<root>/bin]
//	ETCDHOOK_SHARED_DIR  the shared recordings (metacontroller/captured, the
//	                     Metacontroller CRDs) [../shared beside the module root,
//	                     or ../../shared]
//
// ETCDTEST_BIN_DIR and ETCDHOOK_E2E_BIN_DIR, the two names the binary
// directory had before, are not read: nothing in the Makefile, mk/ or .ci
// sets them, and a developer's shell that still does gets an error naming
// ETCDHOOK_BIN_DIR rather than a silent switch to other binaries.
//
// Knobs of one package stay with it: ETCDHOOK_E2E_ARTIFACTS and
// ETCDHOOK_E2E_VERBOSE (test/e2e/harness), ETCDHOOK_E2E_REPORT and friends
// (test/e2e), METACONTROLLER_CRDS (test/apiserver), BENCH_* (test/bench).
//
// # Processes
//
// Start runs a binary with a complete environment (nothing inherited unless
// the caller passes it), stdout and stderr appended to a log file after a
// LogMarker line, in a process group of its own and, on Linux, with
// Pdeathsig=SIGKILL so that no child outlives a test binary that dies
// without running its cleanups. Stop is SIGTERM, a grace period, then
// SIGKILL to the whole group; every wait is bounded. Only processes started
// here are signalled, by their pid (and their own process group).
//
// # Imports
//
// testenv imports only the standard library: it is the leaf every test
// helper (internal/etcdtest, internal/s3test, test/e2e/harness) and test
// builds on, so it may import nothing of this module.
package testenv
