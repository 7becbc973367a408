package apiserver

import "syscall"

// sysProcAttr makes the kernel SIGKILL kube-apiserver if the test binary
// dies without running its cleanups (a -timeout panic, ^C), so no API
// server is left behind holding its port.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
