//go:build !linux

package etcdtest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; cleanups still stop
// every process, only an abrupt death of the test binary can leak one.
func sysProcAttr() *syscall.SysProcAttr { return nil }
