package main

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/agent/report"
)

// TestRestoreFlags: flags the hook rendered wrong are refused with what is
// wrong, before anything runs.
func TestRestoreFlags(t *testing.T) {
	fetch := []string{"--s3-path=bucket/key", "--etcd-version=3.6.16", "--data-dir=/var/etcd/data", "--snapshot=/var/etcd/restore/snapshot.db"}
	apply := []string{"--etcdutl=/usr/local/bin/etcdutl", "--snapshot=/var/etcd/restore/snapshot.db", "--data-dir=/var/etcd/data",
		"--name=m0", "--initial-cluster=m0=http://m0:2380", "--initial-advertise-peer-urls=http://m0:2380"}
	with := func(base []string, extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	tests := []struct {
		name    string
		reason  string
		step    string
		args    []string
		wantErr string
	}{
		{name: "fetch", reason: "what the hook renders for S3", step: "fetch", args: fetch},
		{name: "fetch file", reason: "what the hook renders for a volume", step: "fetch", args: []string{"--file=/backups/etcd.backup", "--etcd-version=3.5.35", "--data-dir=/d", "--snapshot=/s"}},
		{name: "two sources", reason: "one restore, one backup", step: "fetch", args: with(fetch, "--file=/backups/etcd.backup"), wantErr: "--s3-path and --file name two backups"},
		{name: "no source", reason: "nothing to fetch", step: "fetch", args: fetch[1:], wantErr: "give --s3-path or --file"},
		{name: "bad sha256", reason: "a sha256 is 64 hex digits", step: "fetch", args: with(fetch, "--sha256=abc"), wantErr: `--sha256 "abc" is not a sha256`},
		{name: "no etcd version", reason: "without it a newer snapshot could not be refused", step: "fetch", args: []string{fetch[0], fetch[2], fetch[3]}, wantErr: "--etcd-version is required"},
		{name: "bad etcd version", reason: "a version is major.minor.patch", step: "fetch", args: with(fetch, "--etcd-version=latest"), wantErr: "not an etcd version"},
		{name: "fetch without dirs", reason: "both places are needed", step: "fetch", args: fetch[:2], wantErr: "--data-dir is required\n--snapshot is required"},
		{name: "fetch argument", reason: "stray words are a rendering mistake", step: "fetch", args: with(fetch, "now"), wantErr: "takes no arguments"},
		{name: "unknown flag", reason: "the flag package's own error", step: "fetch", args: with(fetch, "--bucket=x"), wantErr: "flag provided but not defined: -bucket"},
		{name: "chain at a revision", reason: "a continuous backup to a revision", step: "fetch", args: with(fetch, "--chain", "--revision=4711", "--key-file=/etc/etcd-restore/key/key")},
		{name: "chain at a moment", reason: "RFC 3339, with fractions", step: "fetch", args: with(fetch, "--chain", "--time=2026-11-27T03:00:00.5Z")},
		{name: "chain, newest", reason: "no target", step: "fetch", args: with(fetch, "--chain")},
		{name: "two targets", reason: "a revision or a moment", step: "fetch", args: with(fetch, "--chain", "--revision=1", "--time=2026-11-27T03:00:00Z"), wantErr: "--revision and --time name two targets"},
		{name: "bad time", reason: "RFC 3339 only", step: "fetch", args: with(fetch, "--chain", "--time=yesterday"), wantErr: `--time "yesterday" is not an RFC 3339 time`},
		{name: "target without chain", reason: "a snapshot has one state", step: "fetch", args: with(fetch, "--revision=5"), wantErr: "add --chain"},
		{name: "chain with sha256", reason: "the rebuilt state has no stored sha256", step: "fetch", args: with(fetch, "--chain", "--sha256="+strings.Repeat("a", 64)), wantErr: "--sha256 names one snapshot"},
		{name: "apply", reason: "what the hook renders", step: "apply", args: apply},
		{name: "both tools", reason: "one release has one tool", step: "apply", args: with(apply, "--etcdctl=/usr/local/bin/etcdctl"), wantErr: "--etcdutl and --etcdctl name two tools; give one"},
		{name: "no tool", reason: "nothing to restore with", step: "apply", args: apply[1:], wantErr: "no restore tool: give --etcdutl (etcd 3.5 and later) or --etcdctl (before 3.5)"},
		{name: "no name", reason: "etcdutl would name the member \"default\"", step: "apply", args: with(apply[:3], apply[4:]...), wantErr: "--name is required"},
		{name: "bump alone", reason: "etcd refuses one without the other", step: "apply", args: with(apply, "--bump-revision=1000000000"), wantErr: "--bump-revision needs --mark-compacted"},
		{name: "bump and compacted", reason: "the pair", step: "apply", args: with(apply, "--bump-revision=1000000000", "--mark-compacted")},
		{name: "negative bump", reason: "a bump is a count", step: "apply", args: with(apply, "--bump-revision=-1"), wantErr: `invalid value "-1" for flag -bump-revision`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.step == "fetch" {
				_, err = parseFetchFlags(tt.args, io.Discard)
			} else {
				_, err = parseApplyFlags(tt.args, io.Discard)
			}
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("%s: %v; want %q", tt.reason, err, tt.wantErr)
			}
		})
	}
	for _, args := range [][]string{nil, {"restore"}, {"fetsh"}} {
		if err := runRestore(args); err == nil || !strings.Contains(err.Error(), `"restore fetch" or "restore apply"`) {
			t.Errorf("restore %q: %v, want the steps named", args, err)
		}
	}
}

// TestRestoreFetchExitCodes: the kubelet sees 3 for a backup that cannot
// be restored (the hook stops retrying), 1 for what a retry may fix, and
// the result in the termination message either way.
func TestRestoreFetchExitCodes(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		reason   string
		args     []string
		wantCode int
		want     report.RestoreResult
	}{{
		name:     "no awsSecret",
		reason:   "a missing Secret will not appear by retrying",
		args:     []string{"--s3-path=bucket/key", "--aws-dir=" + filepath.Join(dir, "no-secret")},
		wantCode: report.ExitBackupUnusable,
		want:     report.RestoreResult{Permanent: true, Source: "s3://bucket/key"},
	}, {
		name:     "bad flags",
		reason:   "a rendering mistake is not the backup's fault",
		args:     []string{"--s3-path=bucket/key", "--file=/backups/x"},
		wantCode: 1,
	}, {
		name:     "already restored",
		reason:   "a member's data dir: nothing to do, success",
		args:     []string{"--file=/backups/x", "--data-dir=" + filepath.Join(dir, "restored")},
		wantCode: 0,
		want:     report.RestoreResult{Succeeded: true, AlreadyRestored: true, Source: "/backups/x"},
	}}
	if err := os.MkdirAll(filepath.Join(dir, "restored", "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			result := filepath.Join(t.TempDir(), "termination-log")
			args := append([]string{"fetch", "--result-file=" + result, "--etcd-version=3.6.16", "--data-dir=" + filepath.Join(dir, "data"),
				"--snapshot=" + filepath.Join(dir, "restore", "snapshot.db")}, tt.args...)
			err := runRestore(args)
			if code := exitCode(err); code != tt.wantCode {
				t.Errorf("%s: exit code %d (%v), want %d", tt.reason, code, err, tt.wantCode)
			}
			data, rerr := os.ReadFile(result)
			if rerr != nil {
				t.Fatal(rerr)
			}
			var got report.RestoreResult
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatalf("termination message %q: %v", data, err)
			}
			got.Reason = ""
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("%s (-want +got):\n%s", tt.reason, d)
			}
		})
	}
	if exitCode(errors.New("any")) != 1 || exitCode(nil) != 0 {
		t.Error("an error without a code exits 1, no error 0")
	}
}
