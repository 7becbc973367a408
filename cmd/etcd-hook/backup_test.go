package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
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
	var res report.BackupResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatalf("termination message %q: %v", data, err)
	}
	if res.Succeeded || !strings.Contains(res.Reason, "AWS credentials file") {
		t.Errorf("result %+v: want a failure naming the AWS credentials file", res)
	}
}

// TestBackupModeTLSFlags: --cert, --key, --cacert (etcdctl's names) and
// --tls-secret parse, and a problem with them is the run's reported
// failure, naming the file and the Secret it is mounted from.
func TestBackupModeTLSFlags(t *testing.T) {
	ca, err := tlstest.NewCA("etcd ca")
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := ca.IssueCluster("demo", "prod", "")
	if err != nil {
		t.Fatal(err)
	}
	mounted := t.TempDir()
	if err := tlstest.WriteFiles(mounted, secrets.Client); err != nil {
		t.Fatal(err)
	}
	tlsFlags := func(dir string) []string {
		return []string{"--cert=" + filepath.Join(dir, "etcd-client.crt"), "--key=" + filepath.Join(dir, "etcd-client.key"),
			"--cacert=" + filepath.Join(dir, "etcd-client-ca.crt"), "--tls-secret=demo-operator"}
	}
	empty := t.TempDir()
	tests := []struct {
		name   string
		reason string
		args   []string
		want   string
	}{
		{name: "Secret not mounted", reason: "an optional Secret that is missing is an empty directory: the Secret and the key are named",
			args: append([]string{"--endpoints=https://demo-client.prod.svc:2379"}, tlsFlags(empty)...),
			want: `the client certificate ` + empty + `/etcd-client.crt is missing: the Secret "demo-operator", mounted at ` + empty + `, is not there or has no key "etcd-client.crt"`},
		{name: "no certificate", reason: "an https endpoint without the flags fails before any call",
			args: []string{"--endpoints=https://demo-client.prod.svc:2379"},
			want: "etcd endpoint https://demo-client.prod.svc:2379 serves TLS, and no client certificate was given"},
		{name: "incomplete", reason: "the three files come together",
			args: []string{"--endpoints=https://demo-client.prod.svc:2379", "--cert=" + filepath.Join(mounted, "etcd-client.crt")},
			want: "a client certificate needs --cert, --key and --cacert together"},
		{name: "parsed", reason: "good files: the run goes on to call the cluster, which is not there",
			args: append([]string{"--endpoints=https://127.0.0.1:1", "--timeout=1s"}, tlsFlags(mounted)...),
			want: "the backup took longer than its timeout of 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			result := filepath.Join(dir, "termination-log")
			args := append([]string{"--dir=" + dir, "--result-file=" + result}, tt.args...)
			if err := runBackup(args); err == nil {
				t.Fatalf("%s: the run succeeded", tt.reason)
			}
			data, err := os.ReadFile(result)
			if err != nil {
				t.Fatal(err)
			}
			var res report.BackupResult
			if err := json.Unmarshal(data, &res); err != nil {
				t.Fatalf("termination message %q: %v", data, err)
			}
			if res.Succeeded || !strings.Contains(res.Reason, tt.want) {
				t.Errorf("%s: reason %q, want %q", tt.reason, res.Reason, tt.want)
			}
		})
	}
}
