package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// RestoreHeader is the restore table of BENCHMARKS.md.
const RestoreHeader = "| database | wall: EtcdRestore to 3 ready | floor | download | etcdutl restore | slowest member start-to-ready (members) | ratio |\n|---|---|---|---|---|---|---|\n"

// TestRestoreBenchReport measures a restore of a database of 256 MiB into
// a cluster of 3 against its floor, measured in the same run: one
// download of the object from the same S3 server, one etcdutl snapshot
// restore of it, and one member's start-to-ready (the slowest of the
// three, which start together), where ready also means holding the data.
// The wall time runs from the EtcdRestore's creation to the cluster
// running at 3 on the restored data. Run with BENCH_REPORT=1 (make bench).
func TestRestoreBenchReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench) to measure")
	}
	const dbSize = 256 << 20
	// A report run must measure, never skip: a missing binary fails it.
	etcdutl, err := testenv.LookBinary(testenv.Etcdutl(etcdtest.Version36))
	if err != nil {
		t.Fatalf("%v (%s)", err, testenv.BuildHint(testenv.Etcdutl(etcdtest.Version36)))
	}

	// The database: 1 MiB values into a member of its own, snapshotted the
	// way an EtcdBackup does, and stored in S3.
	src := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: etcdtest.Version36,
		ExtraArgs: []string{"--quota-backend-bytes=4294967296", "--unsafe-no-fsync"}})
	cli, err := clientv3.New(clientv3.Config{Endpoints: src.Endpoints(), DialTimeout: 5 * time.Second, MaxCallSendMsgSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	value := strings.Repeat("x", 1<<20)
	ctx := context.Background()
	for i := 0; i < dbSize>>20; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/bench/%06d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	snap := filepath.Join(dir, "snapshot.db")
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	size, err := f.ReadFrom(rc)
	_ = rc.Close()
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}

	s3 := s3test.Start(t)
	s3.CreateBucket(t, backupBucket)
	mc, err := minio.New(strings.TrimPrefix(s3.URL, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s3test.AccessKey, s3test.SecretKey, ""), Region: s3test.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mc.FPutObject(ctx, backupBucket, "bench/256.db", snap, minio.PutObjectOptions{PartSize: 8 << 20}); err != nil {
		t.Fatal(err)
	}

	// The floor's parts that happen outside Pods.
	start := time.Now()
	if err := mc.FGetObject(ctx, backupBucket, "bench/256.db", filepath.Join(dir, "downloaded.db"), minio.GetObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	download := time.Since(start)
	restore := timedRestore(t, etcdutl, filepath.Join(dir, "downloaded.db"), filepath.Join(dir, "restored"), "m")

	b := restoreBenchCluster(t, s3)
	run := measureRestore(t, b, b.restoreSpec(exampleName, "bench/256.db"), size)

	floor := download + restore + run.slowest
	r := float64(run.wall) / float64(floor)
	line := fmt.Sprintf("| %d MiB | %s | %s | %s | %s | %s (%d) | %.2f |", size>>20, round(run.wall), round(floor), round(download), round(restore), round(run.slowest), run.members, r)
	appendTableLine(t, "restore", RestoreHeader, line, func() (string, error) { return testenv.FromModuleRoot(os.Getenv("BENCH_RESTORE_FILE")) })
	if r > 1.5 {
		t.Errorf("restore of %d MiB into 3 members: %s, %.2f× the floor of %s (want at most 1.5×)", size>>20, round(run.wall), r, round(floor))
	}
}

// timedRestore runs etcdutl snapshot restore as a restore's member does
// (the revision bumped and marked compacted), and says how long it took.
func timedRestore(t *testing.T, etcdutl, snapshot, dataDir, name string) time.Duration {
	t.Helper()
	start := time.Now()
	if out, err := exec.Command(etcdutl, "snapshot", "restore", snapshot, "--data-dir", dataDir,
		"--name", name, "--initial-cluster", name+"=http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--bump-revision", "1000000000", "--mark-compacted").CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	return time.Since(start)
}

// restoreBenchCluster is the cluster of 3 a bench restores into, on a
// quiet machine: the floor's parts ran on one, so does the restore.
func restoreBenchCluster(t *testing.T, s3 *s3test.Server) *backupScenario {
	t.Helper()
	s := newFaultScenario(t, harness.Options{Restores: true, ClusterCustomize: true})
	s.create("setup", faultVersion, 3)
	s.w.Stop()
	b := &backupScenario{scenario: s, s3: s3}
	b.createSecret("aws", s3test.AccessKey, s3test.SecretKey)
	return b
}

// restoreRun is what measureRestore saw.
type restoreRun struct {
	// wall runs from the EtcdRestore's creation to the last member of
	// the restored cluster ready and holding the data.
	wall time.Duration
	// slowest is the longest start-to-ready of a member of the restored
	// cluster, as the kubelet saw it, ready meaning holding the data too.
	slowest time.Duration
	members int
}

// measureRestore applies the EtcdRestore spec over the running cluster of
// 3 and measures it. A member counts as ready once its database holds 90%
// of size: a Pod turns Ready as soon as its etcd answers serializable
// health checks, which a member that has yet to receive the data (a
// learner, under the serial restore this replaced) does.
func measureRestore(t *testing.T, b *backupScenario, spec map[string]any, size int64) restoreRun {
	t.Helper()
	s := b.scenario
	dataCtx, stopData := context.WithCancel(s.env.Ctx())
	dataAt := map[string]time.Time{}
	dataDone := make(chan struct{})
	go func() {
		defer close(dataDone)
		for dataCtx.Err() == nil {
			for _, name := range s.c.PodNames() {
				if _, ok := dataAt[name]; ok {
					continue
				}
				if st, ok := memberStatus(dataCtx, s.c.MemberURL(name)); ok && st.DbSize >= size*9/10 {
					dataAt[name] = time.Now()
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	start := time.Now()
	b.applyRestore(exampleName, spec)
	var done time.Time
	err := s.env.WaitFor(10*time.Minute, "the restore completed", func() (bool, string) {
		v := b.restoreView(exampleName)
		if v.Cluster.Restore.Phase == "Completed" {
			done = time.Now()
			return true, ""
		}
		if v.Object.Phase == "Failed" || v.Object.Phase == "Refused" {
			return true, ""
		}
		return false, fmt.Sprintf("%+v", v.Cluster.Restore)
	})
	stopData()
	<-dataDone
	if err != nil {
		t.Fatal(err)
	}
	if done.IsZero() {
		t.Fatalf("the restore failed: %+v", b.restoreView(exampleName).Object)
	}
	// The status turns Completed at the first sync after the third member
	// is Ready; the wall ends at the last member's readiness with the
	// data, so that polling does not count.
	var run restoreRun
	var last time.Time
	for _, r := range s.env.Kubelet.ContainerRuns() {
		if r.Namespace != ns || !strings.HasPrefix(r.Pod, exampleName+"-") || r.Container != "etcd" || r.Started.Before(start) || r.Ready.IsZero() {
			continue
		}
		end := r.Ready
		if at, ok := dataAt[r.Pod]; ok && at.After(end) {
			end = at
		}
		run.slowest = max(run.slowest, end.Sub(r.Started))
		run.members++
		last = later(last, end)
	}
	run.wall = done.Sub(start)
	if !last.IsZero() && last.Before(done) {
		run.wall = last.Sub(start)
	}
	if run.members != 3 {
		t.Errorf("%d members of the restored cluster started, want 3", run.members)
	}
	return run
}

// memberStatus asks one member for its status, briefly.
func memberStatus(ctx context.Context, url string) (*clientv3.StatusResponse, bool) {
	cli, err := NewClient(url)
	if err != nil {
		return nil, false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	st, err := cli.Status(ctx, url)
	return st, err == nil
}
