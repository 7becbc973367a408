package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// ChainRestoreHeader is the point-in-time restore table of BENCHMARKS.md.
const ChainRestoreHeader = "| snapshot + deltas | wall: EtcdRestore to 3 ready | floor | download | etcdutl restore | replay into a local etcd | slowest member start-to-ready (members) | ratio |\n|---|---|---|---|---|---|---|---|\n"

const (
	chainBenchDB      = 256 << 20
	chainBenchChanges = 100_000
	chainBenchWorkers = 8
)

// TestChainRestoreBenchReport measures a restore of a continuous backup,
// a 256 MiB snapshot and 100,000 changes after it in deltas, into a
// cluster of 3, against its floor measured in the same run: one download
// of the chain's objects from the same S3 server, one etcdutl snapshot
// restore of the snapshot, the same changes put into a local etcd started
// on it (as fast as 8 clients put them), and one member's start-to-ready
// (the slowest). Run with BENCH_REPORT=1 (make bench).
func TestChainRestoreBenchReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench) to measure")
	}
	etcdutl, err := testenv.LookBinary(testenv.Etcdutl(faultVersion))
	if err != nil {
		t.Fatalf("%v (%s)", err, testenv.BuildHint(testenv.Etcdutl(faultVersion)))
	}
	hook := testenv.Binary(t, testenv.Hook)
	ctx := context.Background()

	// The source: 256 MiB of 1 MiB values.
	src := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: faultVersion,
		ExtraArgs: []string{"--quota-backend-bytes=4294967296", "--unsafe-no-fsync"}})
	cli, err := clientv3.New(clientv3.Config{Endpoints: src.Endpoints(), DialTimeout: 5 * time.Second, MaxCallSendMsgSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	value := strings.Repeat("x", 1<<20)
	for i := 0; i < chainBenchDB>>20; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/bench/%06d", i), value); err != nil {
			t.Fatal(err)
		}
	}

	// The archiver, this project's binary, into a real S3 server.
	s3 := s3test.Start(t)
	s3.CreateBucket(t, backupBucket)
	dir := t.TempDir()
	awsDir := filepath.Join(dir, "aws")
	if err := os.MkdirAll(awsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(awsDir, "credentials"), fmt.Appendf(nil, "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", s3test.AccessKey, s3test.SecretKey), 0o600)
	_ = os.WriteFile(filepath.Join(awsDir, "config"), []byte("[default]\nregion = "+s3test.Region+"\n"), 0o600)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	const key = "bench/chain.db"
	archiver, err := testenv.Start(testenv.ProcessSpec{Path: hook, LogPath: filepath.Join(dir, "archive.log"), Env: []string{"HOME=" + dir},
		Args: []string{"archive", "--endpoints=" + strings.Join(src.Endpoints(), ","), "--s3-path=" + backupBucket + "/" + key,
			"--s3-endpoint=" + s3.URL, "--s3-force-path-style", "--aws-dir=" + awsDir, "--delta-interval=2s",
			"--spool-dir=" + dir, "--status-addr=127.0.0.1:" + strconv.Itoa(port)}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = archiver.Stop(10 * time.Second) }()
	status := func() report.ArchiveStatus {
		var st report.ArchiveStatus
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + report.ArchiveStatusPath)
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&st)
			_ = resp.Body.Close()
		}
		return st
	}
	waitArchived := func(what string, ok func(report.ArchiveStatus) bool) report.ArchiveStatus {
		t.Helper()
		deadline := time.Now().Add(5 * time.Minute)
		for {
			st := status()
			if ok(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("the archiver: %s: %+v", what, st)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	first := waitArchived("the first snapshot", func(st report.ArchiveStatus) bool { return st.History != "" })

	// The changes: 100,000 puts of 100 bytes to distinct keys, from 8
	// clients, every one archived.
	changes := putChanges(t, cli, "/changes/", chainBenchChanges)
	resp, err := cli.Get(ctx, "/bench/000000")
	if err != nil {
		t.Fatal(err)
	}
	last := resp.Header.Revision
	waitArchived(fmt.Sprintf("revision %d stored", last), func(st report.ArchiveStatus) bool { return st.LastDeltaRevision >= last })
	_ = archiver.Stop(10 * time.Second)

	mc, err := minio.New(strings.TrimPrefix(s3.URL, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s3test.AccessKey, s3test.SecretKey, ""), Region: s3test.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	var objects []archive.Object
	for obj := range mc.ListObjects(ctx, backupBucket, minio.ListObjectsOptions{Prefix: key + archive.Dir + first.History + "/", Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		if o, ok := archive.ParseKey(key, obj.Key); ok {
			objects = append(objects, o)
		}
	}

	// The floor's parts that happen outside Pods: the chain's objects
	// downloaded, the snapshot restored, the changes put into a local etcd
	// started on it.
	start := time.Now()
	var snapshot string
	for i, o := range objects {
		file := filepath.Join(dir, fmt.Sprintf("object-%d", i))
		if err := mc.FGetObject(ctx, backupBucket, o.Key, file, minio.GetObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		if o.Kind == archive.KindSnapshot {
			snapshot = file
		}
	}
	download := time.Since(start)
	restored := filepath.Join(dir, "restored")
	restore := timedRestore(t, etcdutl, snapshot, restored, "replay")
	local := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: faultVersion, ExtraArgs: []string{"--data-dir=" + restored, "--name=replay", "--quota-backend-bytes=4294967296"}})
	lcli, err := clientv3.New(clientv3.Config{Endpoints: local.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lcli.Close()
	start = time.Now()
	putChanges(t, lcli, "/changes/", len(changes))
	replay := time.Since(start)

	// The restore, into a cluster of 3 in the harness.
	b := restoreBenchCluster(t, s3)
	var snapKey string
	for _, o := range objects {
		if o.Kind == archive.KindSnapshot {
			snapKey = o.Key
		}
	}
	spec := b.restoreSpec(exampleName, snapKey)
	spec["revision"] = last
	run := measureRestore(t, b, spec, chainBenchDB)

	floor := download + restore + replay + run.slowest
	r := float64(run.wall) / float64(floor)
	line := fmt.Sprintf("| %d MiB + %d changes in %d objects | %s | %s | %s | %s | %s | %s (%d) | %.2f |", chainBenchDB>>20, len(changes), len(objects),
		round(run.wall), round(floor), round(download), round(restore), round(replay), round(run.slowest), run.members, r)
	appendTableLine(t, "chain restore", ChainRestoreHeader, line, func() (string, error) { return testenv.FromModuleRoot(os.Getenv("BENCH_RESTORE_FILE")) })
	if r > 1.3 {
		t.Errorf("a point-in-time restore of %d MiB and %d changes into 3 members: %s, %.2f× the floor of %s (want at most 1.3×)", chainBenchDB>>20, len(changes), round(run.wall), r, round(floor))
	}
}

// putChanges puts n values of 100 bytes under prefix from
// chainBenchWorkers clients at once, and returns the keys.
func putChanges(t *testing.T, cli *clientv3.Client, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%07d", prefix, i)
	}
	value := strings.Repeat("v", 100)
	var wg sync.WaitGroup
	errs := make(chan error, chainBenchWorkers)
	for w := range chainBenchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += chainBenchWorkers {
				if _, err := cli.Put(context.Background(), keys[i], value); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return keys
}
