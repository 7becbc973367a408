package etcdclient_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/membership"
)

// stallProxy relays TCP to one member until Stall. From then on nothing
// crosses any connection, open or new, as across a network partition;
// Heal lets new connections through and leaves the stalled ones stalled,
// as TCP's retransmission backoff leaves them for tens of seconds after a
// long cut heals.
type stallProxy struct {
	ln     net.Listener
	target string
	// delay holds every chunk before it is relayed: a slow path.
	delay time.Duration

	mu      sync.Mutex
	stalled bool
	conns   []*stallConn
}

type stallConn struct {
	mu     sync.Mutex
	frozen bool
	a, b   net.Conn
}

func (c *stallConn) isFrozen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frozen
}

func startStallProxy(t *testing.T, target string, delay time.Duration) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, delay: delay}
	t.Cleanup(p.close)
	go p.serve()
	return p
}

func (p *stallProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *stallProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		c := &stallConn{a: in}
		p.mu.Lock()
		c.frozen = p.stalled
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		c.mu.Lock()
		c.b = out
		c.mu.Unlock()
		go relay(c, in, out, p.delay)
		go relay(c, out, in, p.delay)
	}
}

// relay copies src to dst, and swallows what a frozen connection carries.
func relay(c *stallConn, src, dst net.Conn, delay time.Duration) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		time.Sleep(delay)
		if n > 0 && !c.isFrozen() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	for _, c := range p.conns {
		c.mu.Lock()
		c.frozen = true
		c.mu.Unlock()
	}
}

func (p *stallProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = false
}

func (p *stallProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		for _, conn := range []io.Closer{c.a, c.b} {
			if conn != nil {
				conn.Close()
			}
		}
	}
}

// TestStalledMemberIsSeenOnceHealed: the hook's connection to a member
// stalls, as a partition leaves it, and the partition heals. The next
// sync must reach the member on a new connection, not wait on the old one
// until TCP or keepalive gives up on it.
func TestStalledMemberIsSeenOnceHealed(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	u, err := url.Parse(ec.Members[1].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startStallProxy(t, u.Host, 0)
	endpoints := ec.Endpoints()
	endpoints[1] = proxy.URL()
	c := dial(t, endpoints)
	reachable := func() bool {
		m := find(readMembership(t, c).Members, ec.Members[1].PeerURL)
		return m != nil && m.Reachable
	}
	if !reachable() {
		t.Fatal("the member behind the proxy is unreachable before any stall")
	}
	proxy.Stall()
	if reachable() {
		t.Fatal("the member is reachable through a stalled connection")
	}
	proxy.Heal()
	if !reachable() {
		t.Error("the partition healed, and the next sync still waits on the stalled connection")
	}
}

// leaderlessVoter stands in for a voter that answers Status at once but
// knows no leader, as a member does while cut off from its peers or just
// after the cut heals: a linearizable read on it waits for a leader that
// does not come.
type leaderlessVoter struct {
	pb.UnimplementedMaintenanceServer
	pb.UnimplementedClusterServer
	id uint64
}

func (v *leaderlessVoter) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{Header: &pb.ResponseHeader{MemberId: v.id}, Version: "3.6.16", Errors: []string{"etcdserver: no leader"}}, nil
}

func (v *leaderlessVoter) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func startLeaderlessVoter(t *testing.T, id uint64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	v := &leaderlessVoter{id: id}
	pb.RegisterMaintenanceServer(srv, v)
	pb.RegisterClusterServer(srv, v)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return "http://" + ln.Addr().String()
}

// TestLeaderlessVoterIsNotAskedForTheList: one voter knows no leader and
// answers Status first; the two others are a quorum with a leader. The
// member list must come from them, not from a local read that reports the
// quorum lost.
func TestLeaderlessVoterIsNotAskedForTheList(t *testing.T) {
	ec := etcdtest.StartCluster(t, etcdtest.Options{Size: 3})
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id uint64
	for _, m := range list.Members {
		if slices.Contains(m.PeerURLs, ec.Members[1].PeerURL) {
			id = m.ID
		}
	}
	endpoints := []string{"", startLeaderlessVoter(t, id), ""}
	// The real members answer a little later, as a member that has to
	// consult its leader does anyway.
	for _, i := range []int{0, 2} {
		u, err := url.Parse(ec.Members[i].ClientURL)
		if err != nil {
			t.Fatal(err)
		}
		endpoints[i] = startStallProxy(t, u.Host, 20*time.Millisecond).URL()
	}
	c := dial(t, endpoints)
	for range 3 {
		ms := readMembership(t, c)
		if ms.Stale || !membership.HasQuorum(ms) || len(ms.Members) != 3 {
			t.Fatalf("membership stale=%v quorum=%v members=%d, want a linearizable list of 3 with a quorum", ms.Stale, membership.HasQuorum(ms), len(ms.Members))
		}
	}
}
