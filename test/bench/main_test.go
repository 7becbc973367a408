package bench

import (
	"testing"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// TestMain runs the tests in the e2e harness's sandbox, whose DNS lets
// TestScaleReport give the hook a fleet of member names to resolve. The
// other tests dial loopback addresses and do not notice it.
func TestMain(m *testing.M) { harness.Main(m) }
