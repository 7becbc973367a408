package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// soakWatch samples the soak's invariants every soakSample, the whole run
// long:
//
//   - never two members out at once by the hook's own doing: members (as
//     etcd lists them) whose Pod is missing, not Ready or terminating,
//     less the one the soak's own fault may hold out;
//   - no membership change that loses quorum: the Ready voters are a
//     quorum of the voters;
//   - one cluster ID, except across a restore;
//   - the cluster answers a linearizable read within soakUnreachable,
//     except while a restore replaces it.
//
// A condition must hold for two samples in a row to count, so that the
// Pods and the member list, read a moment apart, are not taken for a
// violation when a member has just moved.
type soakWatch struct {
	k      *soak
	cancel context.CancelFunc
	done   chan struct{}

	mu          sync.Mutex
	fault       bool
	restore     bool
	clusterID   uint64
	n           int
	pending     map[string]string
	violated    []string
	unreachable time.Time
}

const (
	soakSample      = 250 * time.Millisecond
	soakUnreachable = 20 * time.Second
)

func startSoakWatch(k *soak) *soakWatch {
	ctx, cancel := context.WithCancel(k.env.Ctx())
	w := &soakWatch{k: k, cancel: cancel, done: make(chan struct{}), pending: map[string]string{}}
	go w.run(ctx)
	return w
}

func (w *soakWatch) run(ctx context.Context) {
	defer close(w.done)
	var cli *clientv3.Client
	var eps []string
	defer func() {
		if cli != nil {
			_ = cli.Close()
		}
	}()
	for ctx.Err() == nil {
		if urls := w.k.c.MemberURLs(); len(urls) > 0 && !slices.Equal(urls, eps) {
			if cli != nil {
				_ = cli.Close()
			}
			var err error
			if cli, err = NewClient(urls...); err != nil {
				cli = nil
			}
			eps = urls
		}
		if cli != nil {
			w.sample(ctx, cli)
		}
		select {
		case <-ctx.Done():
		case <-time.After(soakSample):
		}
	}
}

func (w *soakWatch) sample(ctx context.Context, cli *clientv3.Client) {
	w.mu.Lock()
	restoring, fault := w.restore, w.fault
	w.mu.Unlock()
	if restoring {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := cli.MemberList(rctx)
	cancel()
	pods := map[string]Pod{}
	for _, p := range w.k.c.Pods() {
		pods[p.Name] = p
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctx.Err() != nil || w.restore {
		return
	}
	w.n++
	now := map[string]string{}
	if err != nil {
		if w.unreachable.IsZero() {
			w.unreachable = time.Now()
		} else if time.Since(w.unreachable) > soakUnreachable {
			now["unreachable"] = fmt.Sprintf("no linearizable read of the member list for %s: %v", round(time.Since(w.unreachable)), err)
		}
	} else {
		w.unreachable = time.Time{}
		if w.clusterID == 0 {
			w.clusterID = resp.Header.ClusterId
		} else if resp.Header.ClusterId != w.clusterID {
			now["cluster ID"] = fmt.Sprintf("cluster ID %x, was %x, with no restore", resp.Header.ClusterId, w.clusterID)
		}
		var out, why []string
		voters, readyVoters := 0, 0
		for _, m := range resp.Members {
			p, ok := pods[m.Name]
			ready := ok && p.Ready && !p.Terminating
			if !m.IsLearner {
				voters++
				if ready {
					readyVoters++
				}
			}
			if !ready {
				out = append(out, m.Name)
				why = append(why, outBecause(m.Name, m.IsLearner, p, ok))
			}
		}
		allowed := 1
		if fault {
			allowed = 2
		}
		if len(out) > allowed {
			now["out"] = fmt.Sprintf("%d members out at once (%s), %d of them the soak's own", len(out), strings.Join(why, ", "), allowed-1)
		}
		if readyVoters < voters/2+1 {
			now["quorum"] = fmt.Sprintf("%d of %d voters ready: no quorum; out: %s", readyVoters, voters, strings.Join(why, ", "))
		}
	}
	for key, msg := range now {
		if _, twice := w.pending[key]; twice {
			w.violated = append(w.violated, fmt.Sprintf("%s step %d: %s", time.Now().Format("15:04:05.000"), w.k.step, msg))
		}
	}
	w.pending = now
}

// outBecause says why a member counts as out, so that a broken invariant
// names what each member was at, not only how many.
func outBecause(name string, learner bool, p Pod, found bool) string {
	kind := ""
	if learner {
		kind = " (learner)"
	}
	switch {
	case name == "":
		return "a member not started yet" + kind
	case !found:
		return name + kind + ": no Pod"
	case p.Terminating:
		return name + kind + ": Pod terminating"
	}
	return fmt.Sprintf("%s%s: Pod not ready, %d restarts", name, kind, p.Restarts)
}

// setFault says whether the operation under way is one of the soak's
// faults.
func (w *soakWatch) setFault(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fault = on
}

// restoring suspends the samples while a restore replaces the cluster.
func (w *soakWatch) restoring(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.restore = on
	w.pending = map[string]string{}
	w.unreachable = time.Time{}
}

// newHistory forgets the cluster ID: a restore makes a new cluster.
func (w *soakWatch) newHistory() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clusterID = 0
}

func (w *soakWatch) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.violated)
}

func (w *soakWatch) samples() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func (w *soakWatch) stop() {
	w.cancel()
	<-w.done
}
