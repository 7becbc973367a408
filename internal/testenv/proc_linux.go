package testenv

import (
	"errors"
	"fmt"
	"syscall"
)

// sysProcAttr puts the child in a process group of its own, so that a ^C at
// the terminal reaches only the test binary, which then stops its children
// in order instead of all at once, and so that Kill can end whatever the
// child started. Pdeathsig makes the kernel SIGKILL the child if the test
// binary dies without running its cleanups (go test's timeout panic, a
// crash, SIGKILL), so nothing is left holding ports and directories.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group pid leads. A group already
// gone is not an error.
func killGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testenv: SIGKILL process group %d: %w", pid, err)
	}
	return nil
}
