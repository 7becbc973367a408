// Package layout holds the repository's structure to its rules, so that
// they cannot erode one change at a time:
//   - every arrow points down: no planner, and not hooks, links a client
//     of etcd, grpc, minio-go or bbolt; etcdclient imports no planner; the
//     leaves (membership, plan, agent/report, agent/archive) import nothing
//     above them;
//   - no package is named after a standard-library package;
//   - no product file is over 400 lines, no file of the test helpers
//     (test/e2e/harness, internal/) over 600, and no file is named after
//     an issue;
//   - internal/testenv, the test helpers' leaf, imports only the standard
//     library, and is the only place that finds the module root, reads CI
//     to choose between skip and fail, or reaches the repository's files
//     from a package directory;
//   - every package with code has a doc.go saying what it is for.
//
// The rules read the module as the go command sees it (go list), or parse
// its files, not a list kept by hand. The package imports internal/testenv
// and nothing else of the module.
package layout
