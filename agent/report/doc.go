// Package report is the contract between the Pods this project runs and
// the planners that read what those Pods report: the results a backup or
// restore step writes as JSON into its termination message, the exit codes
// that tell a retry from a lost cause, and the names of the files a Secret
// must hold.
//
// It is a leaf: it imports only the standard library, so that a pure
// planner can read a Pod's report without linking the agent's etcd, S3
// or bbolt clients. The agent writes these types and the planners decode
// them; neither keeps a copy.
package report
