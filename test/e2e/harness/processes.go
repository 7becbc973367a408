package harness

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// ProcTable tracks every process the harness starts, so that none survives a
// test, whatever happens. The processes themselves are testenv's.
type ProcTable struct {
	mu     sync.Mutex
	procs  map[int]*testenv.Process
	closed bool
}

// NewProcTable returns an empty table.
func NewProcTable() *ProcTable { return &ProcTable{procs: map[int]*testenv.Process{}} }

// Start launches a process and tracks it until it exits.
func (t *ProcTable) Start(spec testenv.ProcessSpec) (*testenv.Process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("start %s: process table closed", spec.Name)
	}
	var p *testenv.Process
	onExit := spec.OnExit
	spec.OnExit = func() {
		t.mu.Lock()
		delete(t.procs, p.Pid)
		t.mu.Unlock()
		if onExit != nil {
			onExit()
		}
	}
	// The table's lock is held until p is set: OnExit cannot run before.
	p, err := testenv.Start(spec)
	if err != nil {
		return nil, err
	}
	t.procs[p.Pid] = p
	return p, nil
}

// Live returns the processes that have not exited yet, by pid. One that has
// exited leaves the table just after Done is closed; it is left out here
// already.
func (t *ProcTable) Live() []*testenv.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*testenv.Process, 0, len(t.procs))
	for _, p := range t.procs {
		if !p.Exited() {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out
}

// StopAll refuses new processes and stops every tracked one, in parallel.
func (t *ProcTable) StopAll(grace time.Duration) {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range t.Live() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.Stop(grace)
		}()
	}
	wg.Wait()
}
