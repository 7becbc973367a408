package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// TestTerminationMessage: a container's termination message is how a run
// reports (the agents' results), so the harness reads it as the kubelet
// does.
func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	report := write("report", `{"succeeded":false,"reason":"no quorum"}`)
	empty := write("empty", "")
	absent := filepath.Join(dir, "absent")
	long := write("long", strings.Repeat("a", 1000)+strings.Repeat("b", maxTerminationMessage))

	// A log two runs share: the earlier run's lines come before the offset
	// of the one that failed, and the harness' marker lines are not the
	// container's output.
	earlier := "earlier run: started\n"
	failed := testenv.LogMarker + "start etcdutl\nrestore: open snapshot: no such file\n" + testenv.LogMarker + "exit etcdutl: exit status 1\n"
	runLog := write("run.log", earlier+failed)
	var many, wide strings.Builder
	for i := range 100 {
		fmt.Fprintf(&many, "line %d\n", i)
	}
	for i := range maxTerminationMessageLogLines {
		fmt.Fprintf(&wide, "%02d %s\n", i, strings.Repeat("w", 96))
	}
	manyLog, wideLog := write("many.log", many.String()), write("wide.log", wide.String())
	lastLines := func(s string, n int) string {
		lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
		return strings.Join(lines[len(lines)-n:], "") + "\n"
	}

	const file, fallback = corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError
	tests := []struct {
		reason   string
		path     string
		policy   corev1.TerminationMessagePolicy
		exitCode int
		log      string
		offset   int64
		want     string
	}{
		{"the file is the message, whatever the exit code", report, file, 0, runLog, 0, `{"succeeded":false,"reason":"no quorum"}`},
		{"a failed run's own report wins over its log", report, fallback, 1, runLog, int64(len(earlier)), `{"succeeded":false,"reason":"no quorum"}`},
		{"no file and the default policy: no message", absent, file, 1, runLog, 0, ""},
		{"an empty file and the default policy: no message", empty, file, 1, runLog, 0, ""},
		{"FallbackToLogsOnError after a failure: this run's log, without the harness' lines", absent, fallback, 1, runLog, int64(len(earlier)), "restore: open snapshot: no such file\n"},
		{"an empty file falls back as a missing one does", empty, fallback, 2, runLog, int64(len(earlier)), "restore: open snapshot: no such file\n"},
		{"FallbackToLogsOnError after a success: the log is not a message", absent, fallback, 0, runLog, 0, ""},
		{"a long file: its last 4096 bytes", long, file, 0, runLog, 0, strings.Repeat("b", maxTerminationMessage)},
		{"a long log: its last 80 lines", absent, fallback, 1, manyLog, 0, lastLines(many.String(), maxTerminationMessageLogLines)},
		{"a wide log: the last 2048 bytes of its last 80 lines", absent, fallback, 1, wideLog, 0, wide.String()[wide.Len()-maxTerminationMessageLogBytes:]},
	}
	for _, tt := range tests {
		got := terminationMessage(tt.path, tt.policy, tt.exitCode, tt.log, tt.offset)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.reason, diff)
		}
	}
}
