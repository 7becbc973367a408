package shard

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkForward is what the replica in between adds to a sync it does
// not own: a steady request of the size a 10,000-cluster fleet sends
// (21 KiB) and a 7 KiB answer, posted to the owner directly and through
// the other replica, both on loopback; the handler only reads and answers.
func BenchmarkForward(b *testing.B) {
	var children strings.Builder
	for i := 0; children.Len() < 21<<10; i++ {
		fmt.Fprintf(&children, `"member-%d":{"metadata":{"name":"member-%d","labels":{"app":"etcd"}},"status":{"phase":"Running","podIP":"10.0.0.%d"}},`, i, i, i%250)
	}
	body := []byte(`{"children":{"Pod.v1":{` + strings.TrimSuffix(children.String(), ",") + `}},"parent":{"metadata":{"uid":"u-1"}}}`)
	rs := startReplicas(b, 2)
	peers := []string{rs[0].addr, rs[1].addr}
	owner, other := rs[0], rs[1]
	if Owner("u-1", peers) != owner.addr {
		owner, other = other, owner
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	post := func(b *testing.B, url string) {
		resp, err := client.Post(url+"/sync", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get(ReplicaHeader) != owner.addr {
			b.Fatalf("answered by %q, not the owner", resp.Header.Get(ReplicaHeader))
		}
	}
	b.Run("owner", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			post(b, owner.srv.URL)
		}
	})
	b.Run("forwarded", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			post(b, other.srv.URL)
		}
	})
}
