package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// archiverPod is the EtcdBackup's archiver Pod as the API holds it.
func (p *pitrScenario) archiverPod() (name string, obj harness.Object) {
	p.t.Helper()
	var found []string
	for _, o := range p.env.API.List(harness.TypePod, ns) {
		md, _ := o["metadata"].(map[string]any)
		labels, _ := md["labels"].(map[string]any)
		if labels["etcd.database.coreos.com/backup-role"] == "archiver" && md["deletionTimestamp"] == nil {
			n, _ := md["name"].(string)
			found = append(found, n)
			name, obj = n, o
		}
	}
	if len(found) != 1 {
		p.t.Fatalf("archiver Pods: %v, want one", found)
	}
	return name, obj
}

// TestContinuousBackupChain: the chain the store holds when two archivers
// run at once (no gap, every write reachable), when the archiver falls
// behind compaction (a new chain, and the status says where the gap is),
// and that an unencrypted chain's snapshot is etcdutl's to read.
func TestContinuousBackupChain(t *testing.T) {
	s := newFaultScenario(t, harness.Options{Backups: true, ClusterCustomize: true})
	s.create("setup", faultVersion, 3)
	if t.Failed() {
		return
	}
	s.w.Stop()
	p := &pitrScenario{backupScenario: newBackupScenario(s)}
	p.createBackupSpec(map[string]any{
		"clusterName": exampleName, "storageType": "S3", "s3": p.s3Spec(pitrKey, "aws"),
		"backupPolicy": map[string]any{"deltaIntervalInSecond": int64(pitrDelta / time.Second)},
	})
	st := p.backupReady("the first snapshot stored", 2*time.Minute)
	chain, _ := st["chain"].(map[string]any)
	p.history, _ = chain["clusterID"].(string)
	ctx := s.env.Ctx()

	// 5: a second archiver, a copy of the first under another name, runs
	// beside it for a while under writes.
	name, obj := p.archiverPod()
	twin := harness.Object{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name + "-twin", "namespace": ns}, "spec": obj["spec"]}
	if _, err := s.env.API.Create(twin); err != nil {
		t.Fatal(err)
	}
	w, err := startPITRWriter(ctx, s.c.ServiceURL(), "/pitr/twins/")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	acks := w.stop()
	last := acks[len(acks)-1].rev
	err = s.env.WaitFor(3*pitrDelta+30*time.Second, "the last write stored", func() (bool, string) {
		h := p.chainHistory()
		return h.End() >= last, fmt.Sprintf("the chain reaches %d of %d", h.End(), last)
	})
	if err != nil {
		t.Error(err)
	}
	// Both stored deltas while the writes ran: each answers with the
	// newest revision it stored.
	for _, pod := range []string{name, name + "-twin"} {
		st := p.archiverStatus(pod)
		if st.LastDeltaRevision < acks[0].rev {
			t.Errorf("two archivers: %s stored up to revision %d, before the writes began at %d: it did not archive beside the other", pod, st.LastDeltaRevision, acks[0].rev)
		}
	}
	if err := s.env.DeletePod(ns, name+"-twin"); err != nil {
		t.Fatal(err)
	}
	h := p.chainHistory()
	path, err := archive.Select(h, archive.Target{Revision: last})
	if err != nil {
		t.Errorf("two archivers: no path to revision %d: %v", last, err)
	}
	covered := path.Snapshot.To
	for _, d := range path.Deltas {
		if d.From > covered+1 {
			t.Errorf("two archivers: a gap before %s (covered to %d)", d.Key, covered)
		}
		covered = max(covered, d.To)
	}
	t.Logf("two archivers: %d puts at %.0f puts/s; %d objects in the store, a path of %d deltas to revision %d", len(acks), w.rate(), len(h.Deltas)+len(h.Snapshots), len(path.Deltas), last)

	// The snapshot of an unencrypted chain is a snapshot etcdutl reads.
	snap := p.object(path.Snapshot.Key)
	file := t.TempDir() + "/snapshot.db"
	if err := os.WriteFile(file, snap, 0o600); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(testenv.Binary(t, testenv.Etcdutl(faultVersion)), "snapshot", "status", file, "-w", "json").CombinedOutput(); err != nil {
		t.Errorf("etcdutl snapshot status %s: %v\n%s", path.Snapshot.Key, err, msg)
	}

	// 6: the archiver gone while the cluster compacts past what it
	// stored: the next one starts a new chain, and says where the gap is.
	// The hook is down meanwhile, so that no archiver is started again
	// before the compaction.
	name, _ = p.archiverPod()
	if err := s.env.Hook.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.env.DeletePod(ns, name); err != nil {
		t.Fatal(err)
	}
	if err := s.env.WaitPodGone(ns, name, time.Minute); err != nil {
		t.Fatal(err)
	}
	cli, err := NewClient(s.c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var rev int64
	for i := range 200 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/pitr/compacted/%04d", i), "x")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if err := s.env.Hook.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var breaks []any
	err = s.env.WaitFor(2*time.Minute, "a chain break in the status", func() (bool, string) {
		st := p.backupStatus()
		chain, _ := st["chain"].(map[string]any)
		breaks, _ = chain["breaks"].([]any)
		return len(breaks) > 0, fmt.Sprintf("chain %v", chain)
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := breaks[len(breaks)-1].(map[string]any)
	from, _ := b["from"].(float64)
	to, _ := b["to"].(float64)
	// The gap begins after what was stored before the archiver went (the
	// writer's last revision at least) and ends where the new chain's
	// snapshot begins, at or after the compaction.
	if int64(from) <= last || int64(from) > rev || int64(to) < rev {
		t.Errorf("the chain break says revisions %v to %v are in no delta; the archiver had stored at least up to %d, and the cluster compacted at %d", b["from"], b["to"], last, rev)
	}
	p.backupReady("archiving on the new chain", time.Minute)
	t.Logf("compaction at %d past the stored %d: a new chain, break %v; BackupReady again", rev, last, b)
}

// chainHistory reads the store's objects of the scenario's history.
func (p *pitrScenario) chainHistory() archive.History {
	p.t.Helper()
	var listed []archive.Listed
	for _, key := range p.keys(pitrKey + archive.Dir + p.history + "/") {
		listed = append(listed, archive.Listed{Key: key})
	}
	for _, h := range archive.Histories(pitrKey, listed) {
		if h.ID == p.history {
			return h
		}
	}
	return archive.History{ID: p.history}
}

// archiverStatus reads an archiver Pod's status at its IP, as the hook
// does.
func (p *pitrScenario) archiverStatus(pod string) report.ArchiveStatus {
	p.t.Helper()
	obj, ok := p.env.API.Get(harness.Ref{Type: harness.TypePod, Namespace: ns, Name: pod})
	if !ok {
		p.t.Fatalf("no Pod %s", pod)
	}
	st, _ := obj["status"].(map[string]any)
	ip, _ := st["podIP"].(string)
	resp, err := http.Get("http://" + net.JoinHostPort(ip, strconv.Itoa(report.ArchiveStatusPort)) + report.ArchiveStatusPath)
	if err != nil {
		p.t.Fatalf("the status of %s: %v", pod, err)
	}
	defer resp.Body.Close()
	var out report.ArchiveStatus
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		p.t.Fatalf("the status of %s: %v", pod, err)
	}
	return out
}
