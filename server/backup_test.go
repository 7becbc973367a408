package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdhook/etcd-hook/agent"
)

// TestBackupModeReportsFailure: a run that cannot even start still leaves
// a termination message naming the cause, and exits non-zero.
func TestBackupModeReportsFailure(t *testing.T) {
	dir := t.TempDir()
	result := filepath.Join(dir, "termination-log")
	err := runBackup([]string{"--endpoints=http://127.0.0.1:1", "--s3-path=bucket/key", "--aws-dir=" + filepath.Join(dir, "no-secret"), "--result-file=" + result})
	if err == nil {
		t.Fatal("a run without credentials succeeded")
	}
	data, rerr := os.ReadFile(result)
	if rerr != nil {
		t.Fatal(rerr)
	}
	var res agent.Result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatalf("termination message %q: %v", data, err)
	}
	if res.Succeeded || !strings.Contains(res.Reason, "AWS credentials file") {
		t.Errorf("result %+v: want a failure naming the AWS credentials file", res)
	}
}
