//go:build unix && !linux

package testenv

import "syscall"

// sysProcAttr keeps the child in the test binary's process group: without a
// parent-death signal outside Linux, a ^C at the terminal reaching the
// child directly is what ends it when the test binary dies at once.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// killGroup has no group of the child's own to kill; Kill signals the
// process itself.
func killGroup(int) error { return nil }
