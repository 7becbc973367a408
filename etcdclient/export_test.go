package etcdclient

import (
	"slices"
	"time"
)

// ConnTLSIDs lists the client certificates the pool's cached connections
// were dialed with, sorted.
func ConnTLSIDs(p *Pool) []string {
	p.conns.mu.Lock()
	defer p.conns.mu.Unlock()
	var out []string
	for el := p.conns.lru.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*conn).tlsID)
	}
	slices.Sort(out)
	return out
}

// SetDefragmentWait shortens how long a defragmentation is waited for,
// until the test ends.
func SetDefragmentWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := defragmentWait
	defragmentWait = d
	t.Cleanup(func() { defragmentWait = old })
}
