package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/agent"
	"github.com/etcdhook/etcd-hook/agent/report"
)

// TestArchiveModeRefuses: a continuous backup that cannot run says why
// before it starts, naming the flag or file.
func TestArchiveModeRefuses(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, reason string
		args         []string
		want         string
	}{
		{"two destinations", "one store", []string{"--endpoints=http://127.0.0.1:1", "--dir=" + dir, "--s3-path=b/k"}, "--dir and --s3-path name two destinations"},
		{"interval too long", "the issue's range is 1 to 60 s", []string{"--endpoints=http://127.0.0.1:1", "--dir=" + dir, "--delta-interval=2m"}, "it must be 1s to 60s"},
		{"interval too short", "under a second is not offered", []string{"--endpoints=http://127.0.0.1:1", "--dir=" + dir, "--delta-interval=100ms"}, "it must be 1s to 60s"},
		{"short key", "a key of another length, its length named and not its bytes", []string{"--endpoints=http://127.0.0.1:1", "--dir=" + dir, "--key-file=" + short}, "is 10 bytes: it must be 32 bytes"},
		{"no endpoints", "nothing to archive", []string{"--dir=" + dir}, "no etcd endpoint"},
		{"https without a certificate", "as a one-shot backup", []string{"--endpoints=https://127.0.0.1:1", "--dir=" + dir}, "serves TLS, and no client certificate was given"},
	}
	for _, tc := range cases {
		err := runArchive(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s (%s): %v, want an error containing %q", tc.name, tc.reason, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789") {
			t.Errorf("%s: the error shows the key: %v", tc.name, err)
		}
	}
}

// The status is served as the hook reads it.
func TestArchiveStatusHandler(t *testing.T) {
	dir := t.TempDir()
	store, err := agent.NewFileStore(dir, "backups")
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.NewArchiver(agent.ArchiveOptions{Endpoints: []string{"http://127.0.0.1:1"}, Base: "k", DeltaInterval: time.Second, SpoolDir: dir}, store)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(archiveStatusHandler(a))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + report.ArchiveStatusPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st report.ArchiveStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status: %v (%s)", err, resp.Header.Get("Content-Type"))
	}
	if st.Now.IsZero() || st.RPO() != 0 {
		t.Errorf("a new archiver's status %+v: want its clock and no RPO yet", st)
	}
}

func TestListenAddr(t *testing.T) {
	cases := []struct{ in, want, reason string }{
		{":8080", ":8080", "every address"},
		{"10.1.2.3:8080", "10.1.2.3:8080", "an IPv4 Pod IP"},
		{"fd00::12:8080", "[fd00::12]:8080", "an IPv6 Pod IP, as $(POD_IP):8080 expands"},
		{"[fd00::12]:8080", "[fd00::12]:8080", "already bracketed"},
	}
	for _, tc := range cases {
		if got := listenAddr(tc.in); got != tc.want {
			t.Errorf("%s: listenAddr(%q) = %q, want %q", tc.reason, tc.in, got, tc.want)
		}
	}
}
