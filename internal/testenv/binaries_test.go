package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBuildHint(t *testing.T) {
	tests := []struct {
		reason, name, want string
	}{
		{"the hook is make build", Hook, "make build"},
		{"a pinned etcd release", Etcd("3.6.16"), "make etcd-bins"},
		{"its tools come with it", Etcdutl("v3.7.3"), "make etcd-bins"},
		{"3.4 is Debian's build, behind a target of its own", Etcd("3.4.23"), "make etcd-bin-3.4"},
		{"kube-apiserver and kubectl are built together", Kubectl, "make kube-bins"},
		{"the Go tools have a make target named after their path", Versitygw, "make bin/versitygw"},
		{"helm", Helm, "make bin/helm"},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, BuildHint(tt.name)); diff != "" {
			t.Errorf("%s: BuildHint(%s) (-want +got):\n%s", tt.reason, tt.name, diff)
		}
	}
}

func TestEtcdNames(t *testing.T) {
	got := []string{Etcd("3.6.16"), Etcd("v3.6.16"), Etcdctl("3.5.35"), Etcdutl("v3.7.3")}
	want := []string{"etcd-v3.6.16", "etcd-v3.6.16", "etcdctl-v3.5.35", "etcdutl-v3.7.3"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the names of mk/etcd.mk, with or without a v (-want +got):\n%s", diff)
	}
}

func TestLookBinary(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]os.FileMode{"runs": 0o755, "plain": 0o644} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(BinDirEnv, dir)
	for _, old := range retiredBinDirEnvs {
		t.Setenv(old, "")
	}
	tests := []struct {
		reason  string
		name    string
		missing bool
	}{
		{"an executable file is found", "runs", false},
		{"a file without an execute bit is no binary", "plain", true},
		{"a directory is no binary", "adir", true},
		{"a missing one is missing", "absent", true},
	}
	for _, tt := range tests {
		p, err := LookBinary(tt.name)
		if got := errors.Is(err, ErrBinaryMissing); got != tt.missing {
			t.Errorf("%s: LookBinary(%s) = %q, %v; missing %v, want %v", tt.reason, tt.name, p, err, got, tt.missing)
		}
		if err == nil && p != filepath.Join(dir, tt.name) {
			t.Errorf("%s: LookBinary(%s) = %s, want it in %s=%s", tt.reason, tt.name, p, BinDirEnv, dir)
		}
	}
}

// TestRetiredBinDirNames: the old names are refused, with the new one in
// the error, unless the new one is set too.
func TestRetiredBinDirNames(t *testing.T) {
	for _, old := range retiredBinDirEnvs {
		t.Run(old, func(t *testing.T) {
			for _, o := range retiredBinDirEnvs {
				t.Setenv(o, "")
			}
			t.Setenv(BinDirEnv, "")
			t.Setenv(old, "/somewhere/bin")
			if _, err := FindBinDir(); err == nil || !strings.Contains(err.Error(), BinDirEnv) {
				t.Errorf("%s set: got %v, want an error naming %s", old, err, BinDirEnv)
			}
			t.Setenv(BinDirEnv, "/elsewhere/bin")
			if got, err := FindBinDir(); err != nil || got != "/elsewhere/bin" {
				t.Errorf("%s set beside %s: got %q, %v; want %s to win", old, BinDirEnv, got, err, BinDirEnv)
			}
		})
	}
}
