package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// Continuous backups end to end: an encrypted EtcdBackup with a delta
// every 2 s under a writer of at least 200 puts/s, on a cluster on
// emptyDir, in a real S3 server; EtcdRestores of its chain to a revision,
// to a moment, refused with a wrong key, with a tampered object and for a
// revision the chain does not hold, and
// to the newest state after every member is lost. The archiver is a Pod
// of the hook's own binary, run by the harness's kubelet; the hook reads
// its status at the Pod's IP.

const (
	pitrBackup   = "pitr"
	pitrKey      = "pitr/etcd.backup"
	pitrDelta    = 2 * time.Second
	pitrWorkers  = 8
	pitrMinRate  = 200.0
	pitrKeySec   = "backup-key"
	pitrLeaseKey = "/pitr-lease/alive"
)

// ackedPut is one put etcd acknowledged: its key, its revision, and when
// the writer had the answer.
type ackedPut struct {
	key string
	rev int64
	at  time.Time
}

// pitrWriter puts distinct keys from several workers at once, as fast as
// the cluster takes them, and remembers every acknowledgement.
type pitrWriter struct {
	prefix string
	cli    *clientv3.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  time.Time
	end    time.Time

	mu       sync.Mutex
	acks     []ackedPut
	attempts int
}

func startPITRWriter(ctx context.Context, endpoint, prefix string) (*pitrWriter, error) {
	cli, err := NewClient(endpoint)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &pitrWriter{prefix: prefix, cli: cli, cancel: cancel, start: time.Now()}
	for g := range pitrWorkers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				key := fmt.Sprintf("%s%02d/%08d", prefix, g, n)
				pctx, cancel := context.WithTimeout(ctx, putTimeout)
				resp, err := cli.Put(pctx, key, strconv.Itoa(n))
				cancel()
				w.mu.Lock()
				w.attempts++
				if err == nil {
					w.acks = append(w.acks, ackedPut{key, resp.Header.Revision, time.Now()})
				}
				w.mu.Unlock()
			}
		}()
	}
	return w, nil
}

// stop ends the writer and returns its acknowledgements, by revision.
func (w *pitrWriter) stop() []ackedPut {
	w.cancel()
	w.wg.Wait()
	w.end = time.Now()
	_ = w.cli.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	sort.Slice(w.acks, func(i, j int) bool { return w.acks[i].rev < w.acks[j].rev })
	return slices.Clone(w.acks)
}

func (w *pitrWriter) rate() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return float64(len(w.acks)) / w.end.Sub(w.start).Seconds()
}

// pitrScenario is one cluster with its continuous backup.
type pitrScenario struct {
	*backupScenario
	// history is the cluster ID whose chain the first restores read.
	history string
}

func (p *pitrScenario) backupStatus() map[string]any {
	obj, _ := p.env.BackupMC.Parent(ns, pitrBackup)
	st, _ := obj["status"].(map[string]any)
	return st
}

// backupReady waits for BackupReady=True, and returns the status.
func (p *pitrScenario) backupReady(what string, timeout time.Duration) map[string]any {
	p.t.Helper()
	var st map[string]any
	err := p.env.WaitFor(timeout, pitrBackup+": BackupReady, "+what, func() (bool, string) {
		st = p.backupStatus()
		conds, _ := st["conditions"].([]any)
		for _, c := range conds {
			c, _ := c.(map[string]any)
			if c["type"] == "BackupReady" {
				return c["status"] == "True", fmt.Sprintf("%v: %v", c["reason"], c["message"])
			}
		}
		return false, "no BackupReady condition"
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return st
}

// present reads which of the keys the cluster holds.
func (p *pitrScenario) present(prefix string) map[string]bool {
	p.t.Helper()
	cli, err := NewClient(p.c.ServiceURL())
	if err != nil {
		p.t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(p.env.Ctx(), 20*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		p.t.Fatal(err)
	}
	out := make(map[string]bool, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = true
	}
	return out
}

// restoreTo applies an EtcdRestore with extra fields and waits for it to
// succeed and the cluster to converge.
func (p *pitrScenario) restoreTo(what string, extra map[string]any) restoreView {
	p.t.Helper()
	spec := map[string]any{"etcdCluster": map[string]any{"name": exampleName}}
	for k, v := range extra {
		spec[k] = v
	}
	start := time.Now()
	p.applyRestore(exampleName, spec)
	v := p.waitRestore(exampleName, 4*time.Minute, what+": the restore succeeded", func(v restoreView) bool {
		return (v.Object.Succeeded && v.Cluster.Restore.Phase == "Completed") || v.Object.Phase == "Failed" || v.Object.Phase == "Refused"
	})
	if !v.Object.Succeeded {
		p.t.Fatalf("%s: the restore %s: %s", what, v.Object.Phase, v.Object.Reason)
	}
	if _, _, err := p.c.WaitConverged(convergeTimeout, 3); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
	if restored := p.c.RestoredPods(); len(restored) != 3 {
		p.t.Errorf("%s: %d member Pods restored the state themselves (%v), want all 3", what, len(restored), restored)
	}
	p.t.Logf("%s: restored at revision %d in %s", what, v.Cluster.Restore.Revision, time.Since(start).Round(100*time.Millisecond))
	return v
}

// refused applies an EtcdRestore that must fail with a reason containing
// want, the members, their Pods and their data untouched.
func (p *pitrScenario) refused(what string, extra map[string]any, want string) {
	p.t.Helper()
	before := p.world(p.c.PodNames())
	spec := map[string]any{"etcdCluster": map[string]any{"name": exampleName}}
	for k, v := range extra {
		spec[k] = v
	}
	p.applyRestore(exampleName, spec)
	v := p.waitRestore(exampleName, 2*time.Minute, what+": the restore failed", func(v restoreView) bool {
		return v.Object.Phase == "Failed" || v.Object.Succeeded
	})
	if v.Object.Succeeded || !strings.Contains(v.Object.Reason, want) {
		p.t.Errorf("%s: phase %s, reason %q; want Failed naming %q", what, v.Object.Phase, v.Object.Reason, want)
	}
	// The failed seed is dropped in the sync that reports the failure;
	// its Pod may still be on its way out when the status is read.
	_ = p.env.WaitFor(30*time.Second, what+": the failed seed's Pod gone", func() (bool, string) {
		pods := p.podUIDs()
		return len(pods) == len(before.Pods), fmt.Sprintf("Pods %v", pods)
	})
	p.checkWorld(what, before, p.c.PodNames())
	p.t.Logf("%s: refused: %s", what, v.Object.Reason)
}

// objects lists the chain's objects of one history.
func (p *pitrScenario) objects(history string) []archive.Object {
	var out []archive.Object
	for _, key := range p.keys(pitrKey + archive.Dir + history + "/") {
		if o, ok := archive.ParseKey(pitrKey, key); ok {
			out = append(out, o)
		}
	}
	return out
}

func (p *pitrScenario) object(key string) []byte {
	p.t.Helper()
	obj, err := p.client.GetObject(context.Background(), backupBucket, key, minio.GetObjectOptions{})
	if err != nil {
		p.t.Fatal(err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		p.t.Fatal(err)
	}
	return data
}

func checkAcked(t *testing.T, what string, present map[string]bool, keep, gone []ackedPut) {
	t.Helper()
	var missing, back []string
	for _, a := range keep {
		if !present[a.key] {
			missing = append(missing, fmt.Sprintf("%s@%d", a.key, a.rev))
		}
	}
	for _, a := range gone {
		if present[a.key] {
			back = append(back, fmt.Sprintf("%s@%d", a.key, a.rev))
		}
	}
	if len(keep) == 0 || len(missing) > 0 || len(back) > 0 {
		t.Errorf("%s: %d acknowledged writes to keep, %d missing %v; %d to be gone, %d present %v",
			what, len(keep), len(missing), missing[:min(5, len(missing))], len(gone), len(back), back[:min(5, len(back))])
	}
}

// TestContinuousBackupRestores: the continuous backup's promises on one
// cluster, in order (each restore replaces the cluster's history; the
// later ones read the first history by a snapshot's key).
func TestContinuousBackupRestores(t *testing.T) {
	s := newFaultScenario(t, harness.Options{Backups: true, Restores: true, ClusterCustomize: true})
	s.create("setup", faultVersion, 3)
	if t.Failed() {
		return
	}
	s.w.Stop()
	p := &pitrScenario{backupScenario: newBackupScenario(s)}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	putSecret(t, s.env, pitrKeySec, map[string][]byte{"key": []byte(base64.StdEncoding.EncodeToString(key))})
	p.createBackupSpec(map[string]any{
		"clusterName": exampleName, "storageType": "S3", "s3": p.s3Spec(pitrKey, "aws"),
		"backupPolicy": map[string]any{"deltaIntervalInSecond": int64(pitrDelta / time.Second)},
		"encryption":   map[string]any{"secretName": pitrKeySec, "key": "key"},
	})
	st := p.backupReady("the first snapshot stored", 2*time.Minute)
	chain, _ := st["chain"].(map[string]any)
	p.history, _ = chain["clusterID"].(string)
	if p.history == "" {
		t.Fatalf("the status names no chain: %v", st)
	}

	// Writes, with a key on a long lease among them, and a quiet second
	// in the middle, the moment a restore to a time then names.
	ctx := s.env.Ctx()
	w, err := startPITRWriter(ctx, s.c.ServiceURL(), "/pitr/a/")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	cli, err := NewClient(s.c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	leased, err := cli.Put(ctx, pitrLeaseKey, "x", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	first := w.stop()
	// The moment is a whole second (what RFC 3339 in a spec says), at
	// least 300 ms after the last write was acknowledged and 500 ms before
	// the next is sent: a moment is placed by when the archiver received
	// a change, which is within milliseconds of its acknowledgement.
	moment := time.Now().Add(300 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(moment.Add(500 * time.Millisecond)))
	w2, err := startPITRWriter(ctx, s.c.ServiceURL(), "/pitr/b/")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	second := w2.stop()
	if r := min(w.rate(), w2.rate()); r < pitrMinRate {
		t.Errorf("the writer reached %.0f puts/s, below the %v the scenario needs", r, pitrMinRate)
	}
	all := append(slices.Clone(first), second...)
	// Everything stored: BackupReady, and the newest delta at the last
	// write's revision.
	last := all[len(all)-1].rev
	err = s.env.WaitFor(3*pitrDelta+30*time.Second, "the last write stored", func() (bool, string) {
		st := p.backupStatus()
		rev, _ := st["lastDeltaRevision"].(float64)
		return int64(rev) >= last, fmt.Sprintf("lastDeltaRevision %v of %d", st["lastDeltaRevision"], last)
	})
	if err != nil {
		t.Error(err)
	}
	t.Logf("writers: %d and %d puts at %.0f and %.0f puts/s, revisions %d to %d; lease key at %d; the moment %s",
		len(first), len(second), w.rate(), w2.rate(), all[0].rev, last, leased.Header.Revision, moment.Format("15:04:05.000"))

	p.encryptedInStore()

	// 2 and 7: a revision in the middle of the first writes, after the
	// lease key.
	r := first[len(first)*3/4].rev
	v := p.restoreTo(fmt.Sprintf("restore to revision %d", r), map[string]any{"backup": map[string]any{"name": pitrBackup}, "revision": r})
	if v.Cluster.Restore.Revision != r {
		t.Errorf("restore to revision %d: the status says revision %d", r, v.Cluster.Restore.Revision)
	}
	var keep, gone []ackedPut
	for _, a := range all {
		if a.rev <= r {
			keep = append(keep, a)
		} else {
			gone = append(gone, a)
		}
	}
	checkAcked(t, fmt.Sprintf("restore to revision %d", r), p.present("/pitr/"), keep, gone)
	if !p.present("/pitr-lease/")[pitrLeaseKey] {
		t.Errorf("restore to revision %d: the key on a lease alive at it (put at revision %d) is missing", r, leased.Header.Revision)
	}

	// 3: a moment, by the backup's name: the restore just made began a
	// new history, and the moment is in the first one.
	snapshot := p.snapshotKey(p.history)
	at := moment.UTC().Format(time.RFC3339)
	p.restoreTo("restore to "+at, map[string]any{"backup": map[string]any{"name": pitrBackup}, "time": at})
	keep, gone = nil, nil
	for _, a := range all {
		if a.at.After(moment) {
			gone = append(gone, a)
		} else {
			keep = append(keep, a)
		}
	}
	checkAcked(t, "restore to "+at, p.present("/pitr/"), keep, gone)

	// 4: a wrong key, and a flipped byte in a delta, refused before any
	// member is touched.
	wrong := make([]byte, 32)
	_, _ = rand.Read(wrong)
	putSecret(t, s.env, "wrong-key", map[string][]byte{"key": wrong})
	p.refused("a wrong key", map[string]any{"backupStorageType": "S3", "s3": p.s3Spec(snapshot, "aws"), "revision": r,
		"encryption": map[string]any{"secretName": "wrong-key", "key": "key"}}, "wrong key")
	p.refused("a revision after the newest stored", map[string]any{"backupStorageType": "S3", "s3": p.s3Spec(snapshot, "aws"), "revision": last + 1_000_000,
		"encryption": map[string]any{"secretName": pitrKeySec, "key": "key"}}, "newer than the newest")
	p.refused("a revision before the oldest snapshot", map[string]any{"backupStorageType": "S3", "s3": p.s3Spec(snapshot, "aws"), "revision": 2,
		"encryption": map[string]any{"secretName": pitrKeySec, "key": "key"}}, "older than the oldest")
	tampered := p.tamperDelta(p.history, r)
	p.refused("a tampered delta", map[string]any{"backupStorageType": "S3", "s3": p.s3Spec(snapshot, "aws"), "revision": last,
		"encryption": map[string]any{"secretName": pitrKeySec, "key": "key"}}, "tamper")
	t.Logf("tampered: %s", tampered)
	// A failed restore is reported while its EtcdRestore stands.
	if err := s.env.RestoreMC.DeleteParent(ns, exampleName); err != nil {
		t.Fatal(err)
	}

	// 1: every member lost at a moment under writes; the newest state.
	p.backupReady("archiving the restored cluster's history", 2*time.Minute)
	w3, err := startPITRWriter(ctx, s.c.ServiceURL(), "/pitr/c/")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(8000+time.Now().UnixNano()%4000) * time.Millisecond)
	lossAt := s.deleteAll()
	third := w3.stop()
	s.waitParent(60*time.Second, "AllMembersLost", isAllMembersLost)
	p.restoreTo("restore the newest state after every member was lost", map[string]any{"backup": map[string]any{"name": pitrBackup}})
	present := p.present("/pitr/c/")
	var lastAcked, lastPresent time.Time
	keep = nil
	for _, a := range third {
		if a.at.Before(lossAt.Add(-5 * time.Second)) {
			keep = append(keep, a)
		}
		lastAcked = later(lastAcked, a.at)
		if present[a.key] {
			lastPresent = later(lastPresent, a.at)
		}
	}
	checkAcked(t, "the newest state after the loss: writes acknowledged 5 s before it", present, keep, nil)
	if lag := lastAcked.Sub(lastPresent); lag > 5*time.Second {
		t.Errorf("the newest state after the loss: the last write present was acknowledged %s before the last acknowledged", lag)
	}
	t.Logf("loss: %d puts at %.0f puts/s, %d present; the last present %s before the last acknowledged", len(third), w3.rate(), len(present), lastAcked.Sub(lastPresent).Round(time.Millisecond))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// createBackupSpec creates the continuous EtcdBackup.
func (p *pitrScenario) createBackupSpec(spec map[string]any) {
	p.t.Helper()
	if _, err := p.env.BackupMC.CreateParent(ns, pitrBackup, spec); err != nil {
		p.t.Fatal(err)
	}
}

// encryptedInStore: every object of the chain is sealed: not a snapshot,
// not JSON, and no key the writer wrote shows in it.
func (p *pitrScenario) encryptedInStore() {
	p.t.Helper()
	objs := p.objects(p.history)
	if len(objs) < 2 {
		p.t.Fatalf("the chain of %s holds %d objects, want a snapshot and deltas", p.history, len(objs))
	}
	for _, o := range objs {
		data := p.object(o.Key)
		if !strings.HasSuffix(o.Key, ".sealed") || !archive.IsSealed(data) || json.Valid(data) ||
			bytes.Contains(data, []byte("/pitr/")) || bytes.Contains(data, []byte(pitrLeaseKey)) {
			p.t.Errorf("object %s (%d bytes) is not sealed, or shows what it holds", o.Key, len(data))
		}
	}
	p.t.Logf("the store: %d objects of %s, every one sealed", len(objs), p.history)
}

// snapshotKey is the key of the oldest snapshot of a history.
func (p *pitrScenario) snapshotKey(history string) string {
	p.t.Helper()
	for _, o := range p.objects(history) {
		if o.Kind == archive.KindSnapshot {
			return o.Key
		}
	}
	p.t.Fatalf("no snapshot of history %s", history)
	return ""
}

// tamperDelta flips a byte in the middle of the first delta above rev.
func (p *pitrScenario) tamperDelta(history string, rev int64) string {
	p.t.Helper()
	for _, o := range p.objects(history) {
		if o.Kind != archive.KindDelta || o.To <= rev {
			continue
		}
		data := p.object(o.Key)
		data[len(data)/2] ^= 0x01
		if _, err := p.client.PutObject(context.Background(), backupBucket, o.Key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			p.t.Fatal(err)
		}
		return o.Key
	}
	p.t.Fatalf("no delta above revision %d in history %s", rev, history)
	return ""
}
