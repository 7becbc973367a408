package history

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Dial returns a client on one endpoint, on a connection of its own.
type Dial func(endpoint string) (*clientv3.Client, error)

// TrafficConfig says how Traffic runs.
type TrafficConfig struct {
	// Prefix is where the keys live: <Prefix>k0, <Prefix>k1, ...
	Prefix string
	// Endpoints gives each client the endpoint it dials: the client
	// Service for some, a member's URL for others.
	Endpoints []string
	Dial      Dial
	// Keys is how many keys the clients share (5 when zero): few, so
	// that the clients contend.
	Keys int
	// Pause is each client's pause between operations (20 ms when zero):
	// the traffic checks, it does not load.
	Pause time.Duration
	// Seed makes the choice of operations reproducible.
	Seed int64
}

const (
	opTimeout = time.Second
	// errorPause slows a client down after a failure, so that a member
	// that is gone does not fill the history with failed writes.
	errorPause = 250 * time.Millisecond
	// A write of unknown outcome may take effect anywhere after its call,
	// and the checker's search grows with their number. A client that
	// failed failuresBeforeReading times in a row only reads until a read
	// succeeds (the cluster is back), and one that made
	// maxUnknownPerClient of them only reads from then on.
	failuresBeforeReading = 3
	maxUnknownPerClient   = 32
)

// Traffic is several clients working on a few keys, recording what they
// asked and what etcd answered.
type Traffic struct {
	cfg    TrafficConfig
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	ops     []Operation
	failed  int
	clients []*clientv3.Client
}

// StartTraffic dials a client per endpoint and starts them.
func StartTraffic(ctx context.Context, cfg TrafficConfig) (*Traffic, error) {
	if len(cfg.Endpoints) == 0 || cfg.Dial == nil {
		return nil, errors.New("history: traffic needs endpoints and a way to dial them")
	}
	if cfg.Keys == 0 {
		cfg.Keys = 5
	}
	if cfg.Pause == 0 {
		cfg.Pause = 20 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	t := &Traffic{cfg: cfg, start: time.Now(), cancel: cancel}
	for i, ep := range cfg.Endpoints {
		cli, err := cfg.Dial(ep)
		if err != nil {
			cancel()
			t.closeClients()
			return nil, fmt.Errorf("history: client %d on %s: %w", i, ep, err)
		}
		t.clients = append(t.clients, cli)
	}
	for i, cli := range t.clients {
		t.wg.Add(1)
		go t.run(ctx, i, cli, rand.New(rand.NewSource(cfg.Seed+int64(i))))
	}
	return t, nil
}

// Key is the i-th key.
func (t *Traffic) Key(i int) string { return fmt.Sprintf("%sk%d", t.cfg.Prefix, i) }

func (t *Traffic) now() int64 { return time.Since(t.start).Nanoseconds() }

func (t *Traffic) run(ctx context.Context, client int, cli *clientv3.Client, rng *rand.Rand) {
	defer t.wg.Done()
	seen := map[string]string{} // the value this client last saw of each key
	unknown, failures := 0, 0
	for seq := 0; ctx.Err() == nil; seq++ {
		in := Input{Key: t.Key(rng.Intn(t.cfg.Keys))}
		switch r := rng.Intn(100); {
		case r < 35 || unknown >= maxUnknownPerClient || failures >= failuresBeforeReading:
			in.Kind = OpGet
		case r < 65:
			in.Kind, in.Value = OpPut, fmt.Sprintf("c%d-%d", client, seq)
		case r < 85:
			in.Kind, in.Value, in.Expect = OpCAS, fmt.Sprintf("c%d-%d", client, seq), seen[in.Key]
		default:
			in.Kind = OpDelete
		}
		call := t.now()
		out, err := do(ctx, cli, in)
		ret := t.now()
		if ctx.Err() != nil && err != nil {
			// Stopped mid-call: the operation is left out; a write may
			// have been applied, which the model allows of any write.
			if in.Kind != OpGet {
				t.record(Operation{Client: client, Input: in, Output: Output{Unknown: true}, Call: call, Return: never}, false)
			}
			return
		}
		if err != nil {
			failures++
		} else {
			failures = 0
		}
		switch {
		case err != nil && in.Kind == OpGet:
			// A read that failed saw nothing and changed nothing.
			t.record(Operation{}, true)
		case errors.Is(err, rpctypes.ErrNoSpace):
			t.record(Operation{Client: client, Input: in, Output: Output{Refused: true}, Call: call, Return: ret}, true)
		case err != nil:
			unknown++
			t.record(Operation{Client: client, Input: in, Output: Output{Unknown: true}, Call: call, Return: never}, true)
		default:
			t.record(Operation{Client: client, Input: in, Output: out, Call: call, Return: ret}, false)
			switch {
			case in.Kind == OpGet:
				seen[in.Key] = out.Value
			case in.Kind == OpPut || (in.Kind == OpCAS && out.Succeeded):
				seen[in.Key] = in.Value
			case in.Kind == OpDelete:
				seen[in.Key] = ""
			}
		}
		pause := t.cfg.Pause
		if err != nil {
			pause = errorPause
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (t *Traffic) record(op Operation, failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if failed {
		t.failed++
	}
	if op.Input.Key != "" {
		t.ops = append(t.ops, op)
	}
}

// do makes one operation against etcd.
func do(ctx context.Context, cli *clientv3.Client, in Input) (Output, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	switch in.Kind {
	case OpGet:
		resp, err := cli.Get(ctx, in.Key)
		if err != nil {
			return Output{}, err
		}
		out := Output{Revision: resp.Header.Revision}
		if len(resp.Kvs) > 0 {
			out.Value = string(resp.Kvs[0].Value)
		}
		return out, nil
	case OpPut:
		resp, err := cli.Put(ctx, in.Key, in.Value)
		if err != nil {
			return Output{}, err
		}
		return Output{Revision: resp.Header.Revision}, nil
	case OpCAS:
		cmp := clientv3.Compare(clientv3.Value(in.Key), "=", in.Expect)
		if in.Expect == "" {
			cmp = clientv3.Compare(clientv3.CreateRevision(in.Key), "=", 0)
		}
		resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(in.Key, in.Value)).Commit()
		if err != nil {
			return Output{}, err
		}
		return Output{Succeeded: resp.Succeeded, Revision: resp.Header.Revision}, nil
	case OpDelete:
		resp, err := cli.Delete(ctx, in.Key)
		if err != nil {
			return Output{}, err
		}
		return Output{Deleted: resp.Deleted > 0, Revision: resp.Header.Revision}, nil
	}
	return Output{}, fmt.Errorf("history: unknown operation %v", in.Kind)
}

// Stop ends the traffic and returns its history.
func (t *Traffic) Stop() []Operation {
	t.cancel()
	t.wg.Wait()
	t.closeClients()
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Operation(nil), t.ops...)
}

func (t *Traffic) closeClients() {
	for _, cli := range t.clients {
		_ = cli.Close()
	}
	t.clients = nil
}

// Counts are the operations recorded so far and the operations that
// failed (failed reads are not recorded).
func (t *Traffic) Counts() (recorded, failed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ops), t.failed
}

// Changes are the writes etcd acknowledged as changing the store, with
// the revision they were made at: what a watch must see.
func Changes(ops []Operation) []Operation {
	var out []Operation
	for _, op := range ops {
		if op.Output.Unknown {
			continue
		}
		switch op.Input.Kind {
		case OpPut:
		case OpCAS:
			if !op.Output.Succeeded {
				continue
			}
		case OpDelete:
			if !op.Output.Deleted {
				continue
			}
		default:
			continue
		}
		out = append(out, op)
	}
	return out
}
