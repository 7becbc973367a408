package etcdclient

import (
	"crypto/tls"
	"fmt"
	"testing"
	"time"
)

// Connections dial lazily, so these tests need no server.

func TestConnsKeepAtMostMaxIdle(t *testing.T) {
	cs := newConns(4, time.Hour)
	t.Cleanup(cs.closeAll)
	for i := range 10 {
		c, err := cs.acquire(fmt.Sprintf("http://m%d.demo.ns.svc:2379", i), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		cs.release(c)
	}
	if got := cs.len(); got != 4 {
		t.Errorf("%d connections kept, want 4", got)
	}
	// The most recent ones are kept.
	c, _ := cs.acquire("http://m9.demo.ns.svc:2379", "", nil)
	defer cs.release(c)
	if got := cs.len(); got != 4 {
		t.Errorf("reusing a kept connection dialed a new one: %d kept", got)
	}
}

func TestConnsNeverCloseOneInUse(t *testing.T) {
	cs := newConns(1, time.Hour)
	t.Cleanup(cs.closeAll)
	var held []*conn
	for i := range 3 {
		c, err := cs.acquire(fmt.Sprintf("http://m%d.demo.ns.svc:2379", i), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if got := cs.len(); got != 3 {
		t.Errorf("%d connections while 3 are in use, want 3", got)
	}
	for _, c := range held {
		if isClosed(c) {
			t.Errorf("connection to %s closed while in use", c.endpoint)
		}
		cs.release(c)
	}
	if got := cs.len(); got != 1 {
		t.Errorf("%d connections kept after release, want 1", got)
	}
}

func TestConnsCloseIdleOnesAfterIdleTimeout(t *testing.T) {
	cs := newConns(10, time.Minute)
	t.Cleanup(cs.closeAll)
	now := time.Now()
	cs.now = func() time.Time { return now }
	old, _ := cs.acquire("http://old.demo.ns.svc:2379", "", nil)
	cs.release(old)
	now = now.Add(2 * time.Minute)
	fresh, _ := cs.acquire("http://fresh.demo.ns.svc:2379", "", nil)
	cs.release(fresh)
	if got := cs.len(); got != 1 {
		t.Errorf("%d connections kept, want only the fresh one", got)
	}
	if !isClosed(old) {
		t.Error("idle connection left open, want it closed")
	}
}

// A connection made with a client certificate since rotated is replaced;
// the old one closes with its last user, not under a call in flight.
func TestReplacedConnClosesWithItsLastUser(t *testing.T) {
	cs := newConns(10, time.Hour)
	t.Cleanup(cs.closeAll)
	const ep = "https://m0.demo.ns.svc:2379"
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	c, _ := cs.acquire(ep, "secret/1", cfg)
	again, _ := cs.acquire(ep, "secret/2", cfg)
	defer cs.release(again)
	if again == c {
		t.Fatal("the connection of a rotated certificate was handed out again")
	}
	if isClosed(c) {
		t.Error("replaced connection closed while still in use")
	}
	cs.release(c)
	if !isClosed(c) {
		t.Error("replaced connection left open after its last user, want it closed")
	}
}

func TestDialRefusesWhatItCannotCall(t *testing.T) {
	for _, tc := range []struct {
		endpoint, reason string
	}{
		{"https://m0.demo.ns.svc:2379", "a member serving TLS, and no client certificate to call it with"},
		{"m0.demo.ns.svc:2379", "no scheme"},
		{"http://", "no host"},
		{"http://m0.demo.ns.svc", "no port"},
		{"unix:///run/etcd.sock", "not http(s)"},
	} {
		if cc, err := newMemberConn(tc.endpoint, nil); err == nil {
			cc.Close()
			t.Errorf("newMemberConn(%q) succeeded, want an error: %s", tc.endpoint, tc.reason)
		}
	}
}

func isClosed(c *conn) bool {
	c.cc.mu.Lock()
	defer c.cc.mu.Unlock()
	return c.cc.closed
}
