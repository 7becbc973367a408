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
