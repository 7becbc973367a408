package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent"
	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/s3test"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// TestBackupCostReport prints the backup table of BENCHMARKS.md: the
// backup agent (bin/etcd-hook backup, a process of its own) against the
// floor measured in the same run, at two database sizes. The floor is
// what a person would do by hand: etcdctl snapshot save to a local file,
// then one upload of that file to the same S3 server, with the same part
// size. The agent's peak RSS at both sizes shows whether its memory
// follows the database. Run with BENCH_REPORT=1 (make bench).
func TestBackupCostReport(t *testing.T) {
	if os.Getenv("BENCH_REPORT") == "" {
		t.Skip("set BENCH_REPORT=1 (make bench) to measure")
	}
	// A report run must measure, never skip: a missing binary fails it.
	hookBin, err := testenv.LookBinary(testenv.Hook)
	if err != nil {
		t.Fatalf("%v (make build etcd-bins)", err)
	}
	etcdctl, err := testenv.LookBinary(testenv.Etcdctl(etcdtest.Version36))
	if err != nil {
		t.Fatalf("%v (make build etcd-bins)", err)
	}
	runs := envInt("BENCH_BACKUP_RUNS", 3)
	sizes := []int64{64 << 20, 256 << 20}

	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 1, Version: etcdtest.Version36,
		ExtraArgs: []string{"--quota-backend-bytes=4294967296", "--unsafe-no-fsync"}})
	endpoint := ec.Endpoints()[0]
	s3 := s3test.Start(t)
	const bucket = "bench-backups"
	s3.CreateBucket(t, bucket)
	awsDir := s3test.AWSDir(t, s3test.AccessKey, s3test.SecretKey)
	client, err := minio.New(strings.TrimPrefix(s3.URL, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s3test.AccessKey, s3test.SecretKey, ""), Region: s3test.Region, BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()

	lines := []string{
		"| database | runs | agent wall p50 | floor p50 (snapshot save + upload) | ratio | agent peak RSS | floor: save | floor: upload |",
		"|---|---|---|---|---|---|---|---|",
	}
	for _, size := range sizes {
		dbSize := fill(t, endpoint, size)
		var agentWall, floorWall, saves, uploads []time.Duration
		var peak int64
		for i := range runs {
			// Alternate, so that whatever else the machine does weighs on
			// both alike; fresh keys each time, so no run overwrites.
			save, upload := floorRun(t, etcdctl, endpoint, client, bucket, filepath.Join(work, "floor.db"), fmt.Sprintf("floor/%d-%d", size, i))
			floorWall = append(floorWall, save+upload)
			saves, uploads = append(saves, save), append(uploads, upload)
			wall, rss := agentRun(t, hookBin, endpoint, s3.URL, awsDir, bucket+fmt.Sprintf("/agent/%d-%d", size, i), filepath.Join(work, "result.json"))
			agentWall = append(agentWall, wall)
			peak = max(peak, rss)
		}
		a, f := median(agentWall), median(floorWall)
		lines = append(lines, fmt.Sprintf("| %d MiB | %d | %s | %s | %.2f | %.1f MiB | %s | %s |",
			dbSize>>20, runs, a.Round(time.Millisecond), f.Round(time.Millisecond), float64(a)/float64(f),
			float64(peak)/(1<<20), median(saves).Round(time.Millisecond), median(uploads).Round(time.Millisecond)))
	}
	report := strings.Join(lines, "\n") + "\n"
	t.Logf("backup cost:\n%s", report)
	if path := os.Getenv("BENCH_BACKUP_FILE"); path != "" {
		if err := writeFromModuleRoot(path, report); err != nil {
			t.Fatal(err)
		}
	}
}

// fill puts 1 MiB values until etcd's database is at least size bytes,
// and returns its size.
func fill(t *testing.T, endpoint string, size int64) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	value := strings.Repeat("x", 1<<20)
	ctx := context.Background()
	for i := 0; ; i++ {
		st, err := cli.Status(ctx, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		if st.DbSize >= size {
			return st.DbSize
		}
		for j := range 16 {
			// Distinct bytes per value, so that nothing compresses it away.
			if _, err := cli.Put(ctx, fmt.Sprintf("/fill/%06d-%02d", i, j), fmt.Sprintf("%08d", i*16+j)+value[8:]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func floorRun(t *testing.T, etcdctl, endpoint string, client *minio.Client, bucket, file, key string) (save, upload time.Duration) {
	t.Helper()
	_ = os.Remove(file)
	start := time.Now()
	if out, err := exec.Command(etcdctl, "--endpoints="+endpoint, "snapshot", "save", file).CombinedOutput(); err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	save = time.Since(start)
	start = time.Now()
	if _, err := client.FPutObject(context.Background(), bucket, key, file, minio.PutObjectOptions{PartSize: agent.PartSize}); err != nil {
		t.Fatal(err)
	}
	return save, time.Since(start)
}

func agentRun(t *testing.T, bin, endpoint, s3URL, awsDir, path, resultFile string) (time.Duration, int64) {
	t.Helper()
	cmd := exec.Command(bin, "backup", "--endpoints="+endpoint, "--s3-path="+path, "--s3-endpoint="+s3URL,
		"--s3-force-path-style", "--aws-dir="+awsDir, "--result-file="+resultFile)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall := time.Since(start)
	if err != nil {
		t.Fatalf("etcd-hook backup: %v\n%s", err, out)
	}
	var res report.BackupResult
	data, _ := os.ReadFile(resultFile)
	if err := json.Unmarshal(data, &res); err != nil || !res.Succeeded {
		t.Fatalf("result %s: %v", data, err)
	}
	rusage, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return wall, rusage.Maxrss << 10 // KiB on Linux
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
