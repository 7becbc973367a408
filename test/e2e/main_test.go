package e2e

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

func TestMain(m *testing.M) {
	// Before harness.Main, which re-executes this binary in the sandbox and
	// exits: the report is started once more there, before any test, which
	// does no harm.
	if err := errors.Join(StartReport(), StartFailureReport()); err != nil {
		fmt.Fprintln(os.Stderr, "e2e report:", err)
		os.Exit(2)
	}
	harness.Main(m)
}

// longTail skips a scenario under -short, which make test passes: each
// such scenario repeats, on another path, a promise that a scenario make
// test keeps already proves (named in why), and make test must stay under
// 45 minutes on a fresh two-core machine. make test-full runs them all.
func longTail(t *testing.T, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("long tail, run by make test-full: " + why)
	}
}
