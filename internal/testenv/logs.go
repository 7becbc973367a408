package testenv

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// maxLogRead caps how much of a log file is read to find a tail or one
// run's output: enough for any fatal error and what led to it.
const maxLogRead = 256 << 10

// ReadLogFrom returns a log from offset on (a Process's LogOffset), at most
// its last maxLogRead bytes: enough to look for one run's errors in a log
// that restarts share.
func ReadLogFrom(path string, offset int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("testenv: open log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("testenv: stat log: %w", err)
	}
	if start := st.Size() - maxLogRead; start > offset {
		offset = start
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("testenv: seek log: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxLogRead))
	if err != nil {
		return nil, fmt.Errorf("testenv: read log: %w", err)
	}
	return b, nil
}

// TailFile returns the last n lines of a file, for a failing test to show.
func TailFile(path string, n int) (string, error) {
	b, err := ReadLogFrom(path, 0)
	if err != nil {
		return "", err
	}
	return lastLines(b, n), nil
}

func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
