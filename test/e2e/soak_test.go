package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The chaos soak: one cluster and its backups under operations chosen at
// random from a seed, for a set time (SOAK=30m; two minutes under
// -short, which make test passes), with invariants sampled all the while
// (soakwatch_test.go) and the writer and the checker beside it. A failure
// names the seed and the step: SOAK_SEED=<seed> replays the same choices.

// soakOp is one kind of operation the soak makes.
type soakOp struct {
	name   string
	weight int
	// fault: the operation breaks something itself (the invariants then
	// count one member out as the soak's, not the hook's).
	fault bool
	// run makes the operation; it returns what it did, for the log, and
	// when the change is seen made (nil: at once). The soak then waits
	// for that, and for the cluster converged at its size.
	run func(k *soak) (string, func() (bool, string))
}

var soakOps = []soakOp{
	{"kill -9 a member", 3, true, (*soak).killMember},
	{"delete a member Pod", 2, true, (*soak).deletePod},
	{"partition a member", 2, true, (*soak).partitionMember},
	{"freeze a member", 2, true, (*soak).freezeMember},
	{"kill the hook", 2, false, (*soak).killHook},
	{"scale 3↔5", 2, false, (*soak).scale},
	{"change spec.pod", 1, false, (*soak).changePod},
	{"upgrade " + oldVersion + "→" + newVersion, 1, false, (*soak).upgrade},
	{"defragment a member", 2, false, (*soak).defragment},
	{"one-shot backup", 2, false, (*soak).backup},
	{"restore a backup of this run", 1, false, (*soak).restore},
}

type soakBackup struct {
	name     string
	revision int64
	// writer is the writer of the history the backup was taken in.
	writer *Writer
}

// soak is one soak's state.
type soak struct {
	*backupScenario
	rng     *rand.Rand
	seed    int64
	step    int
	size    int
	version string
	cpu     int
	// backups of this run not restored yet (a restore from the same
	// location again is refused without restore-again), of any history:
	// a backup taken before an earlier restore must come back above every
	// revision that restore's history reached too.
	backups []soakBackup
	// writers are the writers of every history so far, the current one
	// last.
	writers []*Writer
	// highest is the highest revision any history of the run is known to
	// have reached; a restore must come back above it.
	highest int64
	// restores counts them; olderRestores those from a history before the
	// current one.
	restores, olderRestores int
	watch                   *soakWatch
	counts                  map[string]int
	// failure is the message the soak failed with, said again last.
	failure string
}

func (k *soak) fatalf(format string, args ...any) {
	k.t.Helper()
	k.failure = fmt.Sprintf(format, args...)
	k.t.Fatal(k.failure)
}

func soakDuration(t *testing.T) time.Duration {
	if v := os.Getenv("SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK=%q: %v", v, err)
		}
		return d
	}
	if testing.Short() {
		// make test, which must stay under 45 minutes on a fresh machine;
		// make test-full soaks the full two minutes.
		return 90 * time.Second
	}
	return 2 * time.Minute
}

func soakSeed(t *testing.T) int64 {
	if v := os.Getenv("SOAK_SEED"); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", v, err)
		}
		return seed
	}
	return time.Now().UnixNano()
}

func TestSoak(t *testing.T) {
	harness.RequirePartition(t)
	d, seed := soakDuration(t), soakSeed(t)
	// Registered first, so run last: after the harness's dump of logs on a
	// failure, the failure is said again, where a reader of the output's
	// tail (CI prints the last lines) sees it.
	var k *soak
	t.Cleanup(func() {
		if k != nil && k.failure != "" {
			t.Logf("soak failed (repeated after the logs): %s; replay with SOAK_SEED=%d SOAK=%s", k.failure, seed, d)
		}
	})
	t.Logf("soak: %s, seed %d (replay with SOAK_SEED=%d SOAK=%s)", d, seed, seed, d)
	// The harness lives for the soak, the operation under way when it
	// ends (a restore waits up to 4 minutes) and the checks after it.
	s := newFaultScenario(t, harness.Options{Backups: true, Restores: true, ClusterCustomize: true, Kubelet: harness.KubeletConfig{PodGroups: true}, Lifetime: d + 10*time.Minute})
	k = &soak{backupScenario: newBackupScenario(s), rng: rand.New(rand.NewSource(seed)), seed: seed, size: 3, version: oldVersion, cpu: 100, counts: map[string]int{}}
	s.createSpec("soak: create", map[string]any{"size": 3, "version": oldVersion, "pod": k.podPolicy()})
	if t.Failed() {
		return
	}
	s.startFaultWriter("soak-0")
	k.writers = []*Writer{s.w}
	k.watch = startSoakWatch(k)
	defer k.watch.stop()
	deadline := time.Now().Add(d)
	for k.step = 1; time.Now().Before(deadline); k.step++ {
		op := k.pick()
		k.watch.setFault(op.fault)
		started := time.Now()
		what, done := op.run(k)
		k.converge(op.name, done)
		k.watch.setFault(false)
		k.counts[op.name]++
		t.Logf("soak step %d (seed %d): %s: %s; converged in %s", k.step, seed, op.name, what, round(time.Since(started)))
		if v := k.watch.violations(); len(v) > 0 || t.Failed() {
			k.fatalf("soak: seed %d, step %d (%s): invariants broken:\n%s", seed, k.step, op.name, strings.Join(v, "\n"))
		}
	}
	k.watch.stop()
	s.waitWrites(writesAround)
	_, lost := s.verifyWrites(fmt.Sprintf("soak (seed %d)", seed))
	// Each earlier history's writes were checked at the restore that ended
	// it (a write missing there fails the soak).
	acked := 0
	for _, w := range k.writers {
		acked += w.Acked()
	}
	k.report(d, acked, lost)
}

// pick chooses the next operation by weight; one that cannot run now
// (an upgrade done, no backup to restore) is passed over.
func (k *soak) pick() soakOp {
	var choices []soakOp
	total := 0
	for _, op := range soakOps {
		if (strings.HasPrefix(op.name, "upgrade") && k.version == newVersion) || (strings.HasPrefix(op.name, "restore") && len(k.backups) == 0) {
			continue
		}
		choices = append(choices, op)
		total += op.weight
	}
	n := k.rng.Intn(total)
	for _, op := range choices {
		if n < op.weight {
			return op
		}
		n -= op.weight
	}
	return choices[0]
}

// converge waits for the operation's change to be seen made, then for the
// cluster at its size, every member serving.
func (k *soak) converge(what string, done func() (bool, string)) {
	k.t.Helper()
	timeout := convergeTimeout
	if strings.HasPrefix(what, "upgrade") || strings.HasPrefix(what, "restore") || strings.HasPrefix(what, "change") {
		timeout = 3 * time.Minute
	}
	if done != nil {
		if err := k.env.WaitFor(timeout, what+": the change made", done); err != nil {
			k.fatalf("soak: seed %d, step %d (%s): %v", k.seed, k.step, what, err)
		}
	}
	if _, _, err := k.c.WaitConverged(timeout, k.size); err != nil {
		k.fatalf("soak: seed %d, step %d (%s): %v", k.seed, k.step, what, err)
	}
}

func (k *soak) member() string {
	names := k.c.PodNames()
	return names[k.rng.Intn(len(names))]
}

func (k *soak) killMember() (string, func() (bool, string)) {
	victim := k.member()
	before := k.c.MemberPods()[victim].Restarts
	if err := k.env.Kubelet.KillContainer(ns, victim, "etcd"); err != nil {
		k.t.Fatal(err)
	}
	return victim, func() (bool, string) {
		n := k.c.MemberPods()[victim].Restarts
		return n > before, fmt.Sprintf("%d restarts", n)
	}
}

func (k *soak) deletePod() (string, func() (bool, string)) {
	victim := k.member()
	uid := k.c.MemberPods()[victim].UID
	if err := k.env.DeletePod(ns, victim); err != nil {
		k.t.Fatal(err)
	}
	return victim, func() (bool, string) {
		for _, p := range k.c.MemberPods() {
			if p.UID == uid {
				return false, p.Name + " still there"
			}
		}
		return true, ""
	}
}

func (k *soak) partitionMember() (string, func() (bool, string)) {
	victim := k.member()
	hold := time.Duration(3+k.rng.Intn(8)) * time.Second
	if err := k.env.Kubelet.Partition(ns, victim); err != nil {
		k.t.Fatal(err)
	}
	time.Sleep(hold)
	if err := k.env.Kubelet.Heal(ns, victim); err != nil {
		k.t.Fatal(err)
	}
	return fmt.Sprintf("%s for %s", victim, hold), k.backInCluster(victim)
}

func (k *soak) freezeMember() (string, func() (bool, string)) {
	victim := k.member()
	hold := time.Duration(3+k.rng.Intn(8)) * time.Second
	if err := k.env.Kubelet.Pause(ns, victim, ""); err != nil {
		k.t.Fatal(err)
	}
	time.Sleep(hold)
	if err := k.env.Kubelet.Resume(ns, victim, ""); err != nil {
		k.t.Fatal(err)
	}
	return fmt.Sprintf("%s for %s", victim, hold), k.backInCluster(victim)
}

// backInCluster is done when a member let go after a partition or a freeze
// is back in the cluster as etcd sees it: it names the leader the leader
// names, and it has applied what the leader had committed when first
// asked. Until then the fault is not over, whatever the member's Pod says:
// its readiness probe (etcd's serializable /health) may not have failed
// yet, or not yet passed again. A fault on another member meanwhile would
// be two at once by the soak's own doing: seed 1795734004933758260 killed
// the leader 11 ms after healing a partition, the two members left had
// no leader for a moment, and the soak counted that against the hook.
func (k *soak) backInCluster(victim string) func() (bool, string) {
	var target uint64
	return func() (bool, string) {
		ctx := k.env.Ctx()
		leader, err := k.c.Leader(ctx)
		if err != nil {
			return false, err.Error()
		}
		ls, ok := memberStatus(ctx, k.c.MemberURL(leader))
		if !ok || ls.Leader == 0 {
			return false, "the leader " + leader + " does not answer"
		}
		if target == 0 {
			target = ls.RaftIndex
		}
		vs, ok := memberStatus(ctx, k.c.MemberURL(victim))
		switch {
		case !ok:
			return false, victim + " does not answer"
		case vs.Leader != ls.Leader:
			return false, fmt.Sprintf("%s names leader %x, the leader %x", victim, vs.Leader, ls.Leader)
		case vs.RaftAppliedIndex < target:
			return false, fmt.Sprintf("%s applied up to %d of %d", victim, vs.RaftAppliedIndex, target)
		}
		return true, ""
	}
}

func (k *soak) killHook() (string, func() (bool, string)) {
	down := time.Duration(1+k.rng.Intn(5)) * time.Second
	if err := k.env.Hook.Kill(); err != nil {
		k.t.Fatal(err)
	}
	time.Sleep(down)
	if err := k.env.Hook.Start(k.env.Ctx()); err != nil {
		k.t.Fatal(err)
	}
	return "down " + down.String(), nil
}

func (k *soak) patch(spec map[string]any) {
	k.t.Helper()
	if _, err := k.env.MC.MergePatchParentSpec(ns, exampleName, spec); err != nil {
		k.t.Fatal(err)
	}
}

func (k *soak) scale() (string, func() (bool, string)) {
	from := k.size
	k.size = 8 - k.size // 3 ↔ 5
	k.patch(map[string]any{"size": k.size})
	return fmt.Sprintf("%d → %d", from, k.size), nil
}

// podPolicy is spec.pod: the CPU request is what changePod changes, a
// change that rolls every member.
func (k *soak) podPolicy() map[string]any {
	return map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": fmt.Sprintf("%dm", k.cpu)}}}
}

func (k *soak) changePod() (string, func() (bool, string)) {
	k.cpu += 10
	k.patch(map[string]any{"pod": k.podPolicy()})
	want := fmt.Sprintf("%dm", k.cpu)
	return "CPU request " + want, func() (bool, string) {
		var old []string
		for _, p := range k.c.MemberPods() {
			if p.Requests["cpu"] != want || p.Terminating {
				old = append(old, p.Name)
			}
		}
		return len(old) == 0, fmt.Sprintf("not yet rolled: %v", old)
	}
}

func (k *soak) upgrade() (string, func() (bool, string)) {
	k.version = newVersion
	k.patch(map[string]any{"version": newVersion})
	return oldVersion + " → " + newVersion, func() (bool, string) {
		// Done when the status says so both ways: every member reported
		// on the new release, and the rollout over. The next operation
		// must not meet the upgrade's last restart.
		_, st, _ := k.c.Parent()
		upgrading, _ := st.Condition("Upgrading")
		return st.CurrentVersion == newVersion && upgrading == "False", fmt.Sprintf("status.currentVersion %s, Upgrading %s", st.CurrentVersion, upgrading)
	}
}

func (k *soak) defragment() (string, func() (bool, string)) {
	victim := k.member()
	cli, err := NewClient(k.c.MemberURL(victim))
	if err != nil {
		k.t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(k.env.Ctx(), 30*time.Second)
	defer cancel()
	if _, err := cli.Defragment(ctx, k.c.MemberURL(victim)); err != nil {
		return fmt.Sprintf("%s: %v (etcd refused; not the hook's)", victim, err), nil
	}
	return victim, nil
}

func (k *soak) backup() (string, func() (bool, string)) {
	name := fmt.Sprintf("soak-%d", k.step)
	k.createBackup(name, k.s3Spec("soak/"+name+".db", "aws"), nil)
	st := k.waitBackup(name, 90*time.Second, "the backup succeeded", func(st BackupStatus) bool { return st.Succeeded && st.LastBackup != nil })
	k.backups = append(k.backups, soakBackup{name: name, revision: st.EtcdRevision, writer: k.scenario.w})
	k.highest = max(k.highest, st.EtcdRevision)
	return fmt.Sprintf("%s at revision %d", name, st.EtcdRevision), nil
}

// restore takes the cluster back to a backup of this run, of this history
// or an earlier one. The writer and the checker stop first and are checked
// whole (histories are linearizable between restores, not across one);
// afterwards every write the backup's history acknowledged up to its
// revision must be there, and every one after it gone, as must every write
// of the histories after it.
func (k *soak) restore() (string, func() (bool, string)) {
	i := k.rng.Intn(len(k.backups))
	b := k.backups[i]
	k.backups = slices.Delete(k.backups, i, i+1)
	s := k.scenario
	s.waitWrites(writesAround)
	s.w.Stop()
	k.watch.restoring(true)
	defer k.watch.restoring(false)
	s.checkHistory(true)
	k.applyRestore(exampleName, map[string]any{"etcdCluster": map[string]any{"name": exampleName}, "backup": map[string]any{"name": b.name}})
	v := k.waitRestore(exampleName, 4*time.Minute, "the restore succeeded", func(v restoreView) bool {
		return v.Object.Succeeded && v.Cluster.Restore.Revision > 0
	})
	k.converge("restore", nil)
	restored := v.Cluster.Restore.Revision
	cli, err := NewClient(k.c.MemberURLs()...)
	if err != nil {
		k.t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(k.env.Ctx(), 10*time.Second)
	defer cancel()
	// Every history's writer keys (each writer has a prefix of its own
	// under /writer/): the backup's history is checked, and the later
	// ones, not only the history just ended.
	resp, err := cli.Get(ctx, "/writer/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		k.t.Fatal(err)
	}
	// The restored history starts above every revision the lost one
	// reached, so no watcher is handed events of the new history under
	// revisions it saw in the old one.
	k.highest = max(k.highest, s.w.HighestRevision())
	if resp.Header.Revision <= k.highest {
		k.t.Errorf("soak: seed %d, step %d: restored to store revision %d, not above %d, which the history before the restore reached", k.seed, k.step, resp.Header.Revision, k.highest)
	}
	k.highest = max(k.highest, resp.Header.Revision)
	present := map[string]bool{}
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = true
	}
	// The backup's history up to its revision; after it, that history's
	// later writes and every later history's.
	kept := b.writer.AckedUpTo(restored)
	gone := b.writer.AckedAfter(restored)
	later := slices.Index(k.writers, b.writer) + 1
	for _, w := range k.writers[later:] {
		gone = append(gone, w.AckedAfter(0)...)
	}
	var missing, back []string
	for _, key := range kept {
		if !present[key] {
			missing = append(missing, key)
		}
	}
	for _, key := range gone {
		if present[key] {
			back = append(back, key)
		}
	}
	if len(missing) > 0 || len(back) > 0 {
		k.t.Errorf("soak: seed %d, step %d: restored to revision %d: %d acknowledged writes up to it missing (%v), %d after it still there (%v)",
			k.seed, k.step, restored, len(missing), missing[:min(5, len(missing))], len(back), back[:min(5, len(back))])
	}
	histories := len(k.writers) - later + 1
	k.watch.newHistory()
	s.startFaultWriter(fmt.Sprintf("soak-%d", k.step))
	k.writers = append(k.writers, s.w)
	k.restores++
	if histories > 1 {
		k.olderRestores++
	}
	return fmt.Sprintf("%s (backup revision %d, %d histories back, restored at %d, store at %d): %d acknowledged writes up to it present, %d after it gone",
		b.name, b.revision, histories-1, restored, resp.Header.Revision, len(kept), len(gone)), nil
}

// report prints the soak's table row for RELIABILITY.md.
func (k *soak) report(d time.Duration, acked, lost int) {
	var ops []string
	total, faultCount := 0, 0
	for _, op := range soakOps {
		n := k.counts[op.name]
		total += n
		ops = append(ops, fmt.Sprintf("%s %d", op.name, n))
		if op.fault {
			faultCount += n
		}
	}
	k.t.Logf("soak report | %s | seed %d | %d operations (%s) | %d faults | %d restores, %d of an earlier history | %d samples, %d anomalies | %d writes acknowledged, %d lost |",
		d, k.seed, total, strings.Join(ops, ", "), faultCount, k.restores, k.olderRestores, k.watch.samples(), len(k.watch.violations()), acked, lost)
}
