package etcdclient

import (
	"container/list"
	"crypto/tls"
	"sync"
	"time"
)

// conns shares one connection per member endpoint among all syncs.
// Dialing costs more than the reads a steady sync makes, so connections
// are kept; but a hook serving a thousand clusters cannot keep three
// thousand (each holds buffers), so at most max stay open
// and the least recently used idle ones are closed beyond that.
type conns struct {
	max  int
	idle time.Duration
	now  func() time.Time

	mu    sync.Mutex
	byURL map[string]*list.Element // of *conn
	lru   list.List                // most recently used first
}

type conn struct {
	endpoint string
	// tlsID names the client certificate the connection was dialed with;
	// "" for plain HTTP.
	tlsID    string
	cc       *memberConn
	users    int
	lastUsed time.Time
	// discarded conns are out of the cache and close with their last user.
	discarded bool
}

func newConns(max int, idle time.Duration) *conns {
	return &conns{max: max, idle: idle, now: time.Now, byURL: map[string]*list.Element{}}
}

// acquire returns the endpoint's connection, made with cfg if need be.
// The dial itself is lazy: the first call on it connects. A connection made
// with another client certificate than tlsID names (one rotated since) is
// replaced: it would go on presenting the old certificate until it broke.
func (cs *conns) acquire(endpoint, tlsID string, cfg *tls.Config) (*conn, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	now := cs.now()
	if el, ok := cs.byURL[endpoint]; ok {
		c := el.Value.(*conn)
		if c.tlsID == tlsID {
			c.users++
			c.lastUsed = now
			cs.lru.MoveToFront(el)
			return c, nil
		}
		cs.dropLocked(el)
	}
	cc, err := newMemberConn(endpoint, cfg)
	if err != nil {
		return nil, err
	}
	c := &conn{endpoint: endpoint, tlsID: tlsID, cc: cc, users: 1, lastUsed: now}
	cs.byURL[endpoint] = cs.lru.PushFront(c)
	cs.trim(now)
	return c, nil
}

// release hands the connection back; it stays open for the next sync
// unless it was discarded meanwhile.
func (cs *conns) release(c *conn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c.users--
	if c.discarded && c.users == 0 {
		_ = c.cc.Close()
		return
	}
	cs.trim(cs.now())
}

// dropLocked takes a connection out of the cache; it closes now if no
// call uses it, or with its last user.
func (cs *conns) dropLocked(el *list.Element) {
	c := el.Value.(*conn)
	cs.lru.Remove(el)
	delete(cs.byURL, c.endpoint)
	c.discarded = true
	if c.users == 0 {
		_ = c.cc.Close()
	}
}

// trim closes idle connections beyond the limit, and those unused for the
// idle time (a deleted cluster's), least recently used first.
func (cs *conns) trim(now time.Time) {
	for el := cs.lru.Back(); el != nil; {
		c := el.Value.(*conn)
		prev := el.Prev()
		if c.users == 0 && (cs.lru.Len() > cs.max || now.Sub(c.lastUsed) > cs.idle) {
			cs.lru.Remove(el)
			delete(cs.byURL, c.endpoint)
			_ = c.cc.Close()
		} else if cs.lru.Len() <= cs.max && now.Sub(c.lastUsed) <= cs.idle {
			return
		}
		el = prev
	}
}

func (cs *conns) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for el := cs.lru.Front(); el != nil; el = el.Next() {
		c := el.Value.(*conn)
		c.discarded = true
		if c.users == 0 {
			_ = c.cc.Close()
		}
	}
	cs.lru.Init()
	cs.byURL = map[string]*list.Element{}
}

func (cs *conns) len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.lru.Len()
}
