// Package layout holds the repository's structure to its rules, so that
// they cannot erode one change at a time:
//   - every arrow points down: no planner, and not hooks, links a client
//     of etcd, grpc, minio-go or bbolt; etcdclient imports no planner; the
//     leaves (membership, plan, agent/report) import nothing above them;
//   - no package is named after a standard-library package;
//   - no product file is over 400 lines, and no file is named after an
//     issue;
//   - every package with code has a doc.go saying what it is for.
//
// The rules read the module as the go command sees it (go list), not a
// list kept by hand.
package layout
