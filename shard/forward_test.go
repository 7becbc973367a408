package shard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// replica is one hook replica in front of a handler that records what it
// answered.
type replica struct {
	addr string
	srv  *httptest.Server

	mu       sync.Mutex
	bodies   [][]byte
	outcomes []Outcome
}

func (r *replica) answered() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies
}

func (r *replica) routed() []Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcomes
}

// startReplicas starts n replicas on loopback, each listing all of them
// (and extra addresses) as peers.
func startReplicas(t testing.TB, n int, extra ...string) []*replica {
	t.Helper()
	listeners := make([]net.Listener, n)
	spec := append([]string(nil), extra...)
	for i := range listeners {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners[i] = l
		spec = append(spec, l.Addr().String())
	}
	out := make([]*replica, n)
	for i, l := range listeners {
		r := &replica{addr: l.Addr().String()}
		peers, err := NewPeers(strings.Join(spec, ","), r.addr, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := peers.Refresh(t.Context(), time.Second); err != nil {
			t.Fatal(err)
		}
		rt := &Router{
			Peers:        peers,
			Client:       &http.Client{Timeout: 10 * time.Second},
			Scheme:       "http",
			MaxBodyBytes: 1 << 20,
			Routed: func(o Outcome, _ string, _ error) {
				r.mu.Lock()
				r.outcomes = append(r.outcomes, o)
				r.mu.Unlock()
			},
		}
		local := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.mu.Lock()
			r.bodies = append(r.bodies, body)
			r.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			if bytes.Contains(body, []byte(`"uid":"failing`)) {
				// A sync that failed: the owner's error is the answer.
				w.WriteHeader(http.StatusInternalServerError)
			}
			fmt.Fprintf(w, `{"answeredBy":%q,"path":%q}`, r.addr, req.URL.RequestURI())
		})
		r.srv = httptest.NewUnstartedServer(rt.Handler(local))
		r.srv.Listener = l
		r.srv.Start()
		t.Cleanup(r.srv.Close)
		out[i] = r
	}
	return out
}

// request is a sync request for the parent uid.
func request(uid string) []byte {
	return []byte(`{"children":{"Pod.v1":{}},"controller":{},"finalizing":false,"parent":{"apiVersion":"etcd.database.coreos.com/v1beta2","kind":"EtcdCluster","metadata":{"name":"c","namespace":"ns","uid":"` + uid + `"}},"related":{}}`)
}

// keyOwnedBy returns a parent UID that owner owns among peers.
func keyOwnedBy(t *testing.T, owner string, peers []string) string {
	t.Helper()
	for i := range 1000 {
		uid := fmt.Sprintf("uid-%d", i)
		if Owner(uid, peers) == owner {
			return uid
		}
	}
	t.Fatalf("no key of 1000 is owned by %s", owner)
	return ""
}

func post(t *testing.T, url string, body []byte, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, out
}

func TestForwardToOwner(t *testing.T) {
	rs := startReplicas(t, 2)
	a, b := rs[0], rs[1]
	peers := []string{a.addr, b.addr}
	tests := []struct {
		reason  string
		to      *replica
		body    []byte
		header  []string
		answers *replica
		at      Outcome // the outcome where the request arrived
	}{
		{"a sync the receiving replica owns is answered there", a, request(keyOwnedBy(t, a.addr, peers)), nil, a, Owned},
		{"a sync another replica owns is answered by it, body unchanged", a, request(keyOwnedBy(t, b.addr, peers)), nil, b, Forwarded},
		{"the same from the other side", b, request(keyOwnedBy(t, a.addr, peers)), nil, a, Forwarded},
		{"a forwarded request is never forwarded again, whoever owns it", a, request(keyOwnedBy(t, b.addr, peers)), []string{ForwardedHeader, "10.9.9.9"}, a, Received},
		{"a body that is not a request is answered where it arrived, which refuses it", b, []byte(`{"parent":`), nil, b, Owned},
		{"a body over the bound is answered where it arrived", a, append(request(keyOwnedBy(t, b.addr, peers)), bytes.Repeat([]byte(" "), 1<<20)...), nil, a, Owned},
	}
	for _, tt := range tests {
		before := map[*replica]int{a: len(a.answered()), b: len(b.answered())}
		code, h, out := post(t, tt.to.srv.URL+"/backup/sync?x=1", tt.body, tt.header...)
		if code != http.StatusOK {
			t.Fatalf("%s: HTTP %d: %s", tt.reason, code, out)
		}
		var answer struct{ AnsweredBy, Path string }
		if err := json.Unmarshal(out, &answer); err != nil {
			t.Fatalf("%s: %v: %s", tt.reason, err, out)
		}
		if answer.AnsweredBy != tt.answers.addr || h.Get(ReplicaHeader) != tt.answers.addr || answer.Path != "/backup/sync?x=1" {
			t.Errorf("%s: answered by %s (header %q) at %s, want %s at /backup/sync?x=1", tt.reason, answer.AnsweredBy, h.Get(ReplicaHeader), answer.Path, tt.answers.addr)
		}
		for _, r := range rs {
			want := before[r]
			if r == tt.answers {
				want++
			}
			if got := len(r.answered()); got != want {
				t.Errorf("%s: %s answered %d syncs, want %d: a sync answered twice or not at all", tt.reason, r.addr, got-before[r], want-before[r])
			}
		}
		if got := tt.answers.answered()[len(tt.answers.answered())-1]; !bytes.Equal(got, tt.body) {
			t.Errorf("%s: the handler read %d bytes, not the %d sent", tt.reason, len(got), len(tt.body))
		}
		if got := tt.to.routed(); got[len(got)-1] != tt.at {
			t.Errorf("%s: outcome %q where it arrived, want %q", tt.reason, got[len(got)-1], tt.at)
		}
	}
	if diff := cmp.Diff([]Outcome{Received}, b.routed()[:1]); diff != "" {
		t.Errorf("the owner counts what it was forwarded (-want +got):\n%s", diff)
	}
}

// TestForwardPassesTheOwnersError: a sync the owner answered with an
// error is answered, status and body, as the owner said; it is not made
// again where it arrived.
func TestForwardPassesTheOwnersError(t *testing.T) {
	rs := startReplicas(t, 2)
	a, b := rs[0], rs[1]
	var uid string
	for i := range 1000 {
		if u := fmt.Sprintf("failing-%d", i); Owner(u, []string{a.addr, b.addr}) == b.addr {
			uid = u
			break
		}
	}
	code, h, out := post(t, a.srv.URL+"/sync", request(uid))
	if code != http.StatusInternalServerError || h.Get(ReplicaHeader) != b.addr || !strings.Contains(string(out), b.addr) {
		t.Errorf("HTTP %d from %q: %s; want the owner's 500", code, h.Get(ReplicaHeader), out)
	}
	if len(a.answered()) != 0 || len(b.answered()) != 1 {
		t.Errorf("answered %d times where it arrived and %d by the owner, want 0 and 1", len(a.answered()), len(b.answered()))
	}
	if got := a.routed(); len(got) != 1 || got[0] != Forwarded {
		t.Errorf("outcomes %v, want [forwarded]", got)
	}
}

// TestForwardFallsBack: an owner that cannot take the request, or a port
// that is not a hook's, costs no sync: the replica it arrived at answers.
func TestForwardFallsBack(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.Addr().String()
	closed.Close()
	notHook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Client sent an HTTP request to an HTTPS server.", http.StatusBadRequest)
	}))
	defer notHook.Close()
	other := strings.TrimPrefix(notHook.URL, "http://")

	for _, peer := range []string{gone, other} {
		rs := startReplicas(t, 1, peer)
		a := rs[0]
		uid := keyOwnedBy(t, peer, []string{a.addr, peer})
		code, h, out := post(t, a.srv.URL+"/sync", request(uid))
		if code != http.StatusOK || h.Get(ReplicaHeader) != a.addr {
			t.Errorf("owner %s: HTTP %d from %q: %s; want the sync answered here", peer, code, h.Get(ReplicaHeader), out)
		}
		if got := a.routed(); len(got) != 1 || got[0] != Fallback {
			t.Errorf("owner %s: outcomes %v, want [fallback]", peer, got)
		}
	}
}

// TestForwardFailsOnceSent: an owner that read the whole request may be
// acting on it; the sync is a 502, never answered a second time here.
func TestForwardFailsOnceSent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	read := make(chan struct{}, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// Read the whole request, then drop the connection.
			req, err := http.ReadRequest(bufio.NewReader(c))
			if err == nil {
				_, _ = io.Copy(io.Discard, req.Body)
				read <- struct{}{}
			}
			c.Close()
		}
	}()
	dropping := l.Addr().String()
	a := startReplicas(t, 1, dropping)[0]
	code, _, out := post(t, a.srv.URL+"/sync", request(keyOwnedBy(t, dropping, []string{a.addr, dropping})))
	if code != http.StatusBadGateway || !strings.Contains(string(out), "gave no answer") {
		t.Errorf("HTTP %d: %s; want a 502 naming the owner", code, out)
	}
	select {
	case <-read:
	default:
		t.Error("the owner never read the request")
	}
	if n := len(a.answered()); n != 0 {
		t.Errorf("answered here too (%d): the sync ran beside the owner's", n)
	}
	if got := a.routed(); len(got) != 1 || got[0] != Failed {
		t.Errorf("outcomes %v, want [failed]", got)
	}
}
