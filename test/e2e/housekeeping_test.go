package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
)

// The NOSPACE scenario: a 3-member cluster with a 32 MiB quota and
// spec.housekeeping on is filled until etcd raises its NOSPACE alarm.
//  1. The status says so (Degraded, reason NoSpace).
//  2. Most keys are deleted; the hook compacts, defragments each member
//     and disarms the alarm, by itself.
//  3. Writes succeed again.
//  4. Every member's database file shrinks by at least the share of the
//     data deleted.
//  5. At no time is more than one member out: Pod readiness and etcd's
//     answers are sampled throughout.

const (
	housekeepingQuota = 32 << 20
	fillValueSize     = 100 << 10
	// noSpaceTimeout covers Metacontroller's periodic resync (60 s): an
	// alarm changes no Kubernetes object, so the first sync after it may
	// be the periodic one.
	noSpaceTimeout = 90 * time.Second
	// A sample every 50 ms; a member that does not answer Status within
	// 300 ms counts as out (a member that is not busy answers in
	// milliseconds).
	housekeepingSamplePause   = 50 * time.Millisecond
	housekeepingSampleTimeout = 300 * time.Millisecond
)

func TestHousekeepingNoSpace(t *testing.T) {
	for _, version := range []string{currentVersion, etcdtest.Version35} {
		t.Run("v"+version, func(t *testing.T) {
			if version != currentVersion {
				longTail(t, "the NOSPACE recovery is proven on "+currentVersion)
			}
			noSpaceScenario(t, version)
		})
	}
}

func noSpaceScenario(t *testing.T, version string) {
	s := newScenario(t, version)
	ctx := s.env.Ctx()
	s.startWriter("housekeeping")
	start, syncs := time.Now(), s.syncs()
	if _, err := s.env.MC.CreateParent(ns, exampleName, map[string]any{
		"size": 3, "version": version,
		"etcd":         map[string]any{"quotaBackendBytes": housekeepingQuota},
		"housekeeping": map[string]any{},
	}); err != nil {
		t.Fatal(err)
	}
	s.converge("create with a 32 MiB quota and spec.housekeeping", start, syncs, 3)
	s.startWriter("nospace")
	s.waitWrites(writesAround)

	watch := watchHousekeeping(ctx, s.c)
	cli, err := NewClient(s.c.ServiceURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	// 1. Filled to NOSPACE, and the status says so.
	filled := fillUntilNoSpace(t, ctx, cli, "/fill/")
	alarmed := time.Now()
	full := s.memberSizes(ctx)
	t.Logf("NOSPACE after %d puts of 100 KiB; database files: %s", filled, full)
	if err := s.env.WaitFor(noSpaceTimeout, "Degraded NoSpace", func() (bool, string) {
		_, st, _ := s.c.Parent()
		status, reason := st.Condition("Degraded")
		return status == "True" && reason == "NoSpace", fmt.Sprintf("Degraded %s/%s", status, reason)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("status said NoSpace %v after the alarm", time.Since(alarmed).Round(time.Millisecond))

	// 2. Most keys deleted (allowed under NOSPACE); the hook does the rest.
	keep := filled / 5
	del, err := cli.Delete(ctx, fmt.Sprintf("/fill/%06d", keep), clientv3.WithRange("/fill0"))
	if err != nil {
		t.Fatalf("delete under NOSPACE: %v", err)
	}
	freed := float64(del.Deleted) / float64(del.Deleted+int64(keep))
	deleted := time.Now()
	t.Logf("deleted %d of %d keys (%.0f%% of the data)", del.Deleted, del.Deleted+int64(keep), 100*freed)

	// 3. Writes succeed again.
	if err := s.env.WaitFor(3*time.Minute, "a put accepted after the recovery", func() (bool, string) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cli.Put(pctx, "/after-recovery", "accepted")
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()
	t.Logf("writes accepted %v after the keys were deleted", recovered.Sub(deleted).Round(time.Millisecond))
	if err := s.env.WaitFor(noSpaceTimeout, "Degraded without NoSpace", func() (bool, string) {
		_, st, _ := s.c.Parent()
		status, reason := st.Condition("Degraded")
		return status == "False", fmt.Sprintf("Degraded %s/%s", status, reason)
	}); err != nil {
		t.Error(err)
	}

	// 4. Every file shrank by at least the share deleted.
	after := s.memberSizes(ctx)
	t.Logf("database files after the recovery: %s", after)
	for name, size := range full {
		// What stays, and a little for the writer's keys and bbolt's own
		// pages.
		limit := int64(float64(size)*(1-freed)) + 2<<20
		if got, ok := after[name]; !ok || got > limit {
			t.Errorf("member %s: database file %d bytes after the recovery, want at most %d (was %d, %.0f%% deleted)", name, got, limit, size, 100*freed)
		}
	}

	// 5. Never more than one member out.
	samples := watch.Stop()
	worst, silent := 0, 0
	for _, smp := range samples {
		if len(smp.Unready) > 1 {
			t.Errorf("%s: %d members not ready at once: %v", smp.At.Format("15:04:05.000"), len(smp.Unready), smp.Unready)
		}
		worst = max(worst, len(smp.Unready))
		if len(smp.Silent) > 0 {
			silent++
		}
		if len(smp.Silent) > 1 {
			t.Errorf("%s: %d members do not answer at once: %v", smp.At.Format("15:04:05.000"), len(smp.Silent), smp.Silent)
		}
	}
	t.Logf("%d samples: at most %d member Pod not ready at once; %d samples caught one member not answering (a defragmentation)", len(samples), worst, silent)
	for _, line := range watch.Timeline() {
		t.Log(line)
	}
	s.checkHousekeepingActions(alarmed, samples, len(full))
	s.waitWrites(writesAround)
	s.verifyWrites("nospace")
}

// fillUntilNoSpace puts 100 KiB values until etcd refuses one for lack of
// space, and returns the index of that put.
func fillUntilNoSpace(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) int {
	t.Helper()
	value := strings.Repeat("x", fillValueSize)
	for i := 0; i < 2*housekeepingQuota/fillValueSize; i++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cli.Put(pctx, fmt.Sprintf("%s%06d", prefix, i), value)
		cancel()
		if errors.Is(err, rpctypes.ErrNoSpace) || rpctypes.ErrorDesc(err) == rpctypes.ErrNoSpace.Error() {
			return i
		}
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	t.Fatalf("twice the quota written and no NOSPACE")
	return 0
}

// memberSizes are the members' database files, by name, as each says.
type memberSizes map[string]int64

func (m memberSizes) String() string {
	var parts []string
	for _, name := range sorted(keysOf(m)) {
		parts = append(parts, fmt.Sprintf("%s %.1f MiB", name, float64(m[name])/(1<<20)))
	}
	return strings.Join(parts, ", ")
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (s *scenario) memberSizes(ctx context.Context) memberSizes {
	s.t.Helper()
	out := memberSizes{}
	for _, name := range s.c.PodNames() {
		cli, err := NewClient(s.c.MemberURL(name))
		if err != nil {
			s.t.Fatal(err)
		}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := cli.Status(sctx, s.c.MemberURL(name))
		cancel()
		cli.Close()
		if err != nil {
			s.t.Fatalf("status of %s: %v", name, err)
		}
		out[name] = st.DbSize
	}
	return out
}

// checkHousekeepingActions reads the hook's log: the history compacted
// before any defragmentation after it, each member defragmented once per
// compaction with the leader of the time last, and the alarm disarmed last.
// A member is defragmented again only once all members had their turn:
// etcd drops the compacted revisions in the background, and the hook takes
// again a member whose file shows its turn came before that was done.
func (s *scenario) checkHousekeepingActions(since time.Time, samples []housekeepingSample, members int) {
	s.t.Helper()
	logged, err := LoggedActions(s.env.Hook.LogPath, s.c)
	if err != nil {
		s.t.Fatal(err)
	}
	var actions []string
	var times []time.Time
	for _, a := range logged {
		at, err := time.Parse(time.RFC3339Nano, a.Time)
		if err != nil || at.Before(since) {
			continue
		}
		actions, times = append(actions, a.Action), append(times, at)
	}
	s.t.Logf("housekeeping steps the hook made: %s", strings.Join(actions, "; "))
	if len(actions) == 0 || !strings.HasPrefix(actions[0], "compact") || actions[len(actions)-1] != "disarm the NOSPACE alarm" {
		s.t.Errorf("want a compaction first and the alarm disarmed last, got %q", actions)
		return
	}
	var round []string
	leaderDone := ""
	for i, a := range actions[:len(actions)-1] {
		switch {
		case strings.HasPrefix(a, "compact"):
			round, leaderDone = nil, ""
		case strings.HasPrefix(a, "defragment member "):
			member, _, _ := strings.Cut(strings.TrimPrefix(a, "defragment member "), " ")
			switch {
			case slices.Contains(round, member) && len(round) < members:
				s.t.Errorf("member %s defragmented twice after one compaction, before every member had its turn: %q", member, actions)
			case slices.Contains(round, member):
				s.t.Logf("member %s defragmented again after every member had its turn", member)
			case leaderDone != "":
				s.t.Errorf("member %s defragmented after the leader %s: the leader goes last (%q)", member, leaderDone, actions)
			default:
				if leaderAt(samples, times[i]) == member {
					leaderDone = member
				}
				round = append(round, member)
			}
		default:
			s.t.Errorf("unexpected step %q among %q", a, actions)
		}
	}
}

// leaderAt is the leader as the last sample before t saw it.
func leaderAt(samples []housekeepingSample, t time.Time) string {
	leader := ""
	for _, smp := range samples {
		if smp.At.After(t) {
			break
		}
		if smp.Leader != "" {
			leader = smp.Leader
		}
	}
	return leader
}

// housekeepingSample is the cluster at one instant of the recovery.
type housekeepingSample struct {
	At time.Time
	// Unready are member Pods not ready, or on their way out.
	Unready []string
	// Silent are ready members whose etcd did not answer Status in time:
	// a defragmentation holds it.
	Silent []string
	// Leader is the member that calls itself the leader.
	Leader      string
	Progressing string
	Degraded    string
}

type housekeepingWatch struct {
	c      *Cluster
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	samples []housekeepingSample
}

// watchHousekeeping samples every 50 ms until Stop.
func watchHousekeeping(ctx context.Context, c *Cluster) *housekeepingWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &housekeepingWatch{c: c, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx)
	return w
}

func (w *housekeepingWatch) run(ctx context.Context) {
	defer close(w.done)
	clients := map[string]*clientv3.Client{}
	defer func() {
		for _, cli := range clients {
			_ = cli.Close()
		}
	}()
	for ctx.Err() == nil {
		smp := housekeepingSample{At: time.Now()}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, p := range w.c.Pods() {
			if !p.Ready || p.Terminating {
				smp.Unready = append(smp.Unready, p.Name)
				continue
			}
			cli, ok := clients[p.Name]
			if !ok {
				var err error
				if cli, err = NewClient(w.c.MemberURL(p.Name)); err != nil {
					continue
				}
				clients[p.Name] = cli
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sctx, cancel := context.WithTimeout(ctx, housekeepingSampleTimeout)
				defer cancel()
				st, err := cli.Status(sctx, w.c.MemberURL(p.Name))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && ctx.Err() == nil:
					smp.Silent = append(smp.Silent, p.Name)
				case err == nil && st.Header != nil && st.Leader == st.Header.MemberId:
					smp.Leader = p.Name
				}
			}()
		}
		wg.Wait()
		slices.Sort(smp.Silent)
		if _, st, ok := w.c.Parent(); ok {
			for _, c := range st.Conditions {
				switch c.Type {
				case "Progressing":
					smp.Progressing = c.Reason + ": " + c.Message
				case "Degraded":
					smp.Degraded = c.Status + " " + c.Reason
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.samples = append(w.samples, smp)
		w.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(housekeepingSamplePause):
		}
	}
}

// Stop ends the sampling and returns the samples.
func (w *housekeepingWatch) Stop() []housekeepingSample {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.samples)
}

// Timeline lists each change of the parent's Progressing and Degraded
// conditions, and each sample with a member out, once.
func (w *housekeepingWatch) Timeline() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	var last string
	for _, smp := range w.samples {
		line := fmt.Sprintf("Degraded %s | Progressing %s", smp.Degraded, smp.Progressing)
		if len(smp.Unready) > 0 || len(smp.Silent) > 0 {
			line += fmt.Sprintf(" | unready %v, not answering %v", smp.Unready, smp.Silent)
		}
		if line != last {
			out = append(out, smp.At.Format("15:04:05.000")+" "+line)
			last = line
		}
	}
	return out
}
