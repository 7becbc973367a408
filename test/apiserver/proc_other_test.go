//go:build !linux

package apiserver

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
