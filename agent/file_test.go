package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
)

// TestFileStoreBackup: the volume destination, against real etcd: a
// one-shot file with its metadata beside it, periodic retention, and a
// corrupt stream that leaves the earlier backup as it was and no partial
// file behind.
func TestFileStoreBackup(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: etcdtest.Version37})
	root := t.TempDir()
	store, err := NewFileStore(root, "backups")
	if err != nil {
		t.Fatal(err)
	}
	opts := BackupOptions{Endpoints: ec.Endpoints(), Timeout: time.Minute}
	res := Backup(context.Background(), opts, store, "demo/etcd.backup")
	if !res.Succeeded || res.Location != "pvc://backups/demo/etcd.backup" {
		t.Fatalf("result %+v", res)
	}
	data, err := os.ReadFile(filepath.Join(root, "demo", "etcd.backup"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	var meta map[string]string
	raw, _ := os.ReadFile(filepath.Join(root, "demo", "etcd.backup.json"))
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatal(err)
	}
	if meta[MetaSHA256] != hex.EncodeToString(sum[:]) || meta[MetaRevision] != fmt.Sprint(res.EtcdRevision) || meta[MetaClusterID] != res.ClusterID {
		t.Errorf("metadata %v, result %+v, file sha256 %x", meta, res, sum)
	}

	// A corrupt stream: nothing replaces the backup, nothing is left over.
	stream := withTrailer(bytes.Repeat([]byte("page"), 1<<16))
	stream[10] ^= 1
	if err := store.Put(context.Background(), "demo/etcd.backup", newVerifyingReader(bytes.NewReader(stream)), nil); err == nil || !strings.Contains(err.Error(), "integrity") {
		t.Fatalf("Put of a corrupt snapshot: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(root, "demo", "etcd.backup"))
	if !bytes.Equal(after, data) {
		t.Error("the earlier backup changed")
	}
	entries, _ := os.ReadDir(filepath.Join(root, "demo"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), partialPrefix) {
			t.Errorf("partial file left behind: %s", e.Name())
		}
	}

	// Periodic: named by revision and time, the newest 2 kept.
	at := time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC)
	for i := range 4 {
		now := at.Add(time.Duration(i) * time.Minute)
		o := opts
		o.Periodic, o.MaxBackups, o.Now = true, 2, func() time.Time { return now }
		if r := Backup(context.Background(), o, store, "periodic/etcd.backup"); !r.Succeeded {
			t.Fatal(r.Reason)
		}
	}
	objs, err := store.List(context.Background(), "periodic/etcd.backup")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || !strings.Contains(objs[1].Key, "03:03:00") {
		t.Errorf("kept %+v, want the two newest", objs)
	}
	metas, _ := filepath.Glob(filepath.Join(root, "periodic", "*.json"))
	if len(metas) != 2 {
		t.Errorf("%d metadata files for 2 backups: %v", len(metas), metas)
	}
}
