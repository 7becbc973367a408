package testenv

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// recorder stands in for a test: it records what the rule asked of it
// instead of skipping or failing for real.
type recorder struct {
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestSkipOrFail(t *testing.T) {
	const msg = "testenv: binary missing: bin/etcd-v3.6.16; run \"make etcd-bins\" from the repository root"
	tests := []struct {
		reason string
		ci     string
		want   recorder
	}{
		{"a developer's machine: not having run make is normal", "", recorder{skipped: msg}},
		{"CI=true: the script forgot to build it, and a skip would test nothing", "true", recorder{failed: msg + ciSuffix}},
		{"only the value true counts, as everywhere in this repository", "1", recorder{skipped: msg}},
		{"CI=false is a developer's machine", "false", recorder{skipped: msg}},
	}
	for _, tt := range tests {
		t.Setenv(CIEnv, tt.ci)
		var got recorder
		SkipOrFail(&got, "%s", msg)
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(recorder{})); diff != "" {
			t.Errorf("%s: CI=%q (-want +got):\n%s", tt.reason, tt.ci, diff)
		}
	}
}

func TestRequire(t *testing.T) {
	t.Setenv(CIEnv, "true")
	var met recorder
	Require(&met, true, "never shown")
	if diff := cmp.Diff(recorder{}, met, cmp.AllowUnexported(recorder{})); diff != "" {
		t.Errorf("a met requirement must neither skip nor fail (-want +got):\n%s", diff)
	}
	var unmet recorder
	Require(&unmet, false, "nft not found")
	if diff := cmp.Diff(recorder{failed: "nft not found" + ciSuffix}, unmet, cmp.AllowUnexported(recorder{})); diff != "" {
		t.Errorf("an unmet requirement in CI must fail (-want +got):\n%s", diff)
	}
}
