package etcdtest

import "syscall"

// sysProcAttr makes the kernel SIGKILL etcd if the test binary dies without
// running its cleanups (a go test -timeout panic, a crash, ^C), so no etcd
// is left behind holding ports and data dirs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
