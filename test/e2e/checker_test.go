package e2e

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/test/e2e/history"
)

// The checker beside the writer. Every step that starts a writer
// (startWriter) also starts clients that Put, read linearizably,
// compare-and-swap and Delete on a few keys of the step's own, and a
// watch on them through the client Service. verifyWrites then checks,
// besides the writer's acknowledged puts:
//
//   - that the clients' history is linearizable (porcupine, each key a
//     register);
//   - that the watch saw every change in revision order, with no gap and
//     no duplicate, and the same events the store replays;
//   - that every member gives the same HashKV at one revision and the
//     same cluster ID.
//
// A step whose writer is replaced without verifyWrites (the cluster was
// lost on purpose) has its history checked for linearizability alone.

const (
	// historyPause is each checker client's pause between operations:
	// three or four clients at 10 operations a second each, beside the
	// writer, on the two cores the members share.
	historyPause = 100 * time.Millisecond
	// checkTimeout bounds porcupine's search; a history it cannot decide
	// in that time fails the step rather than pass unchecked.
	checkTimeout = 2 * time.Minute
	// agreementTimeout is how long a member may take to apply the
	// revision the others hash at.
	agreementTimeout = 30 * time.Second
)

// stepHistory is the checker of one step.
type stepHistory struct {
	step    string
	prefix  string
	seed    int64
	traffic *history.Traffic
	watcher *clientv3.Client
	watch   *history.Watch
	from    int64
}

func dialOne(endpoint string) (*clientv3.Client, error) { return NewClient(endpoint) }

// startHistory starts the checker of a step, first checking the one
// before it if it was never verified.
func (s *scenario) startHistory(step string) {
	s.t.Helper()
	if s.h != nil {
		s.checkHistory(false)
	}
	// A prefix of the step's own, numbered: a scenario may name two steps
	// alike, and each history starts from absent keys.
	s.histories++
	prefix := fmt.Sprintf("/history/%s-%d/", step, s.histories)
	// Two clients through the client Service, as applications connect,
	// and one on each of the first and last member's URL when there are
	// members yet (a step that creates the cluster has none).
	endpoints := []string{s.c.ServiceURL(), s.c.ServiceURL()}
	if urls := s.c.MemberURLs(); len(urls) > 0 {
		endpoints = append(endpoints, urls[0])
		if len(urls) > 1 {
			endpoints = append(endpoints, urls[len(urls)-1])
		}
	} else {
		endpoints = append(endpoints, s.c.ServiceURL())
	}
	watcher, err := NewClient(s.c.ServiceURL())
	if err != nil {
		s.t.Fatal(err)
	}
	// The watch starts after the newest revision the cluster reports, or
	// at the first when it cannot say (it is being created): the step's
	// keys are its own, so earlier revisions hold none of them.
	from := int64(1)
	ctx, cancel := context.WithTimeout(s.env.Ctx(), 3*time.Second)
	if resp, err := watcher.Get(ctx, prefix); err == nil {
		from = resp.Header.Revision + 1
	}
	cancel()
	sum := fnv.New64a()
	_, _ = sum.Write([]byte(s.t.Name() + "/" + step))
	seed := int64(sum.Sum64() >> 1)
	tr, err := history.StartTraffic(s.env.Ctx(), history.TrafficConfig{Prefix: prefix, Endpoints: endpoints, Dial: dialOne, Pause: historyPause, Seed: seed})
	if err != nil {
		_ = watcher.Close()
		s.t.Fatal(err)
	}
	h := &stepHistory{step: step, prefix: prefix, seed: seed, traffic: tr, watcher: watcher, from: from,
		watch: history.StartWatch(s.env.Ctx(), watcher, prefix, from)}
	s.h = h
	s.t.Cleanup(func() {
		if s.h == h {
			h.traffic.Stop()
			h.watch.Stop()
			_ = h.watcher.Close()
		}
	})
}

// checkHistory stops the step's checker and checks what it recorded. full
// adds the watch's completeness and the members' agreement, which only a
// converged cluster can give.
func (s *scenario) checkHistory(full bool) {
	s.t.Helper()
	h := s.h
	s.h = nil
	if h == nil {
		return
	}
	defer h.watcher.Close()
	ops := h.traffic.Stop()
	_, failed := h.traffic.Counts()
	dir := filepath.Join(os.TempDir(), "etcd-hook-e2e-history", strings.ReplaceAll(s.t.Name(), "/", "_"), h.step)
	v := history.Check(ops, checkTimeout, dir)
	if err := v.Err(); err != nil {
		s.t.Errorf("%s: %v (traffic seed %d)", h.step, err, h.seed)
	}
	changes := history.Changes(ops)
	var last int64
	for _, c := range changes {
		last = max(last, c.Output.Revision)
	}
	if full && last > 0 {
		if err := h.watch.WaitFor(s.env.Ctx(), last, 30*time.Second); err != nil {
			s.t.Errorf("%s: %v", h.step, err)
		}
	}
	events, reopened := h.watch.Stop()
	if c := h.watch.Compacted(); c != 0 {
		s.t.Errorf("%s: the watch of %s, resumed after revision %d, met a compaction at %d: events lost to it", h.step, h.prefix, lastRevision(events, h.from-1), c)
	}
	if err := history.CheckEvents(events, h.from, changes); err != nil {
		s.t.Errorf("%s: watch through the client Service: %v", h.step, err)
	}
	replayed := "not replayed"
	if full && len(events) > 0 {
		replay, compacted, err := history.Replay(s.env.Ctx(), h.watcher, h.prefix, h.from, events[len(events)-1].Revision)
		switch {
		case err != nil:
			s.t.Errorf("%s: replaying the watch's revisions: %v", h.step, err)
		case compacted != 0:
			replayed = "the store compacted them since"
		default:
			if err := history.CheckReplay(events, replay); err != nil {
				s.t.Errorf("%s: %v", h.step, err)
			}
			replayed = "as replayed"
		}
	}
	agreed := "not asked"
	if full {
		if err := history.Agreement(s.env.Ctx(), dialOne, s.c.MemberURLs(), agreementTimeout); err != nil {
			s.t.Errorf("%s: %v", h.step, err)
		} else {
			agreed = "every member alike"
		}
	}
	s.t.Logf("%s: checker: %d operations (%d failed, %d of unknown outcome, %d refused with NOSPACE): %s; watch: %d events, reopened %d times, %s; HashKV and cluster ID: %s",
		h.step, len(ops), failed, v.Unknown, v.Refused, v.Result, len(events), reopened, replayed, agreed)
}

func lastRevision(events []history.Event, none int64) int64 {
	if len(events) == 0 {
		return none
	}
	return events[len(events)-1].Revision
}
