package testenv

import (
	"fmt"
	"os"
)

// CIEnv is the variable CI sets to "true" (every major CI system does).
const CIEnv = "CI"

// InCI reports whether the tests run in CI, where every prerequisite must be
// there.
func InCI() bool { return os.Getenv(CIEnv) == "true" }

// SkipFailer is the part of testing.TB the CI rule needs. It is an interface
// of its own so that the rule can be tested with a recorder in place of a
// test that would really skip.
type SkipFailer interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// ciSuffix is appended to the message when the rule fails a test, so that
// nobody wonders why the same test skips on their machine.
const ciSuffix = " (CI=true: a missing prerequisite is a failure, not a skip)"

// SkipOrFail is the rule for a missing prerequisite: skip the test on a
// developer's machine, fail it when CI=true. The message should say how to
// get what is missing ("run make etcd-bins").
func SkipOrFail(t SkipFailer, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s", msg+ciSuffix)
		return
	}
	t.Skipf("%s", msg)
}

// Require applies SkipOrFail unless ok.
func Require(t SkipFailer, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		SkipOrFail(t, format, args...)
	}
}
