package harness

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// The kubelet's limits on a termination message (MaxContainerTermination*
// in its container package): the file is read up to its last 4096 bytes; a
// message taken from the log is its last 80 lines, at most their last 2048
// bytes.
const (
	maxTerminationMessage         = 4096
	maxTerminationMessageLogBytes = 2048
	maxTerminationMessageLogLines = 80
)

// terminationMessage is the message of a terminated container as the
// kubelet reports it, and so how a run reports its result (the agents write
// theirs to terminationMessagePath, as JSON): the end of the file behind
// terminationMessagePath, read whatever the exit code; with
// terminationMessagePolicy FallbackToLogsOnError, when that file is missing
// or empty and the container failed, the end of this run's log instead (the
// log from logOffset, the run's own part of a log its restarts share).
func terminationMessage(path string, policy corev1.TerminationMessagePolicy, exitCode int, logPath string, logOffset int64) string {
	fallback := policy == corev1.TerminationMessageFallbackToLogsOnError && exitCode != 0
	msg, err := readEnd(path, maxTerminationMessage)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Sprintf("Error on reading termination log %s: %v", path, err)
	case len(msg) > 0:
		return string(msg)
	}
	if !fallback {
		return ""
	}
	return runLogEnd(logPath, logOffset)
}

// readEnd reads at most the last max bytes of a file, as the kubelet's
// tail.ReadAtMost does.
func readEnd(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		if _, err := f.Seek(-max, io.SeekEnd); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// runLogEnd is what the kubelet takes from a failed container's log: its
// last maxTerminationMessageLogLines lines, at most their last
// maxTerminationMessageLogBytes bytes. The harness' own lines in the log
// (testenv.LogMarker) are left out: a container runtime's log has none.
func runLogEnd(logPath string, logOffset int64) string {
	b, err := testenv.ReadLogFrom(logPath, logOffset)
	if err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	var lines []string
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, testenv.LogMarker) {
			lines = append(lines, line)
		}
	}
	if len(lines) > maxTerminationMessageLogLines {
		lines = lines[len(lines)-maxTerminationMessageLogLines:]
	}
	s := strings.Join(lines, "")
	if len(s) > maxTerminationMessageLogBytes {
		s = s[len(s)-maxTerminationMessageLogBytes:]
	}
	return s
}
