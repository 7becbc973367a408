package etcdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// memberConn carries the hook's etcd calls to one member over one HTTP/2
// connection (h2conn). It is a grpc.ClientConnInterface, so etcd's
// generated clients (pb.NewClusterClient and the rest) call through it
// unchanged; the member's gRPC server cannot tell it from grpc-go.
//
// Why not grpc-go's ClientConn: a hook serving thousands of clusters cannot
// keep a connection to every member, so most syncs of a large fleet dial,
// and a grpc-go ClientConn costs twice the CPU to dial, call and close, and
// five goroutines to keep (TestConnectionCostReport, BENCHMARKS.md). The
// hook only makes unary calls, and a unary call is all this carries: one
// length-prefixed protobuf message each way, and the status in the
// trailers. Calls to one member take turns on its connection.
//
// The connection is dialed by the first call that needs it, the member's
// name resolved then, and dialed again by the next call after it breaks:
// a member that restarted answers the next sync, with no reconnect
// backoff in between.
type memberConn struct {
	scheme, host string
	// tls is the client certificate's configuration; nil for a plain
	// cluster. A member still on plain HTTP (a cluster moving to TLS has
	// both) is called without it.
	tls *tls.Config

	// turn admits one call at a time; a call waits for its turn within
	// its own deadline.
	turn chan struct{}

	mu     sync.Mutex
	h2     *h2conn // nil until dialed, and after it broke
	closed bool
}

var _ grpc.ClientConnInterface = (*memberConn)(nil)

// dial connects to the member, with a TLS handshake for https, and opens
// HTTP/2 on the connection.
func (m *memberConn) dial(ctx context.Context) (*h2conn, error) {
	nc, err := (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", dialAddress(m.host, hostDomain()))
	if err != nil {
		return nil, err
	}
	if m.scheme == "https" {
		cfg := m.tls.Clone()
		// The member's DNS name, which its server certificate must carry
		// (*.<cluster>.<namespace>.svc).
		cfg.ServerName, _, _ = net.SplitHostPort(m.host)
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = nc.Close()
			return nil, err
		}
		nc = tc
	}
	h, err := newH2Conn(nc, m.scheme)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	return h, nil
}

// Limits on what a member may send back. Every answer the hook reads is
// small: a status, a member list, a user list.
const (
	maxHeaderBytes = 64 << 10
	maxAnswerBytes = 4 << 20
)

// newMemberConn checks the endpoint; it dials nothing.
func newMemberConn(endpoint string, cfg *tls.Config) (*memberConn, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("etcd endpoint %q: %w", endpoint, err)
	}
	switch {
	case u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		return nil, fmt.Errorf("etcd endpoint %q: want http(s)://host:port", endpoint)
	case u.Scheme == "https" && cfg == nil:
		return nil, fmt.Errorf("etcd endpoint %q serves TLS, and no client certificate is configured for it", endpoint)
	case u.Port() == "":
		return nil, fmt.Errorf("etcd endpoint %q: no port", endpoint)
	}
	return &memberConn{scheme: u.Scheme, host: u.Host, tls: cfg, turn: make(chan struct{}, 1)}, nil
}

// Close closes the connection; a call in flight fails, and later ones do
// not dial.
func (m *memberConn) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.h2 == nil {
		return nil
	}
	err := m.h2.close()
	m.h2 = nil
	return err
}

// take returns the connection for the call that holds the turn: the open
// one if the member has not dropped it, else a new one. fresh says it was
// just dialed.
func (m *memberConn) take(ctx context.Context) (h *h2conn, fresh bool, err error) {
	m.mu.Lock()
	h, closed := m.h2, m.closed
	m.mu.Unlock()
	if closed {
		return nil, false, status.Error(codes.Canceled, "the connection was closed")
	}
	if h != nil {
		if h.alive() {
			return h, false, nil
		}
		m.drop(h)
	}
	h, err = m.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, status.FromContextError(ctx.Err()).Err()
		}
		return nil, false, status.Errorf(codes.Unavailable, "connection error: %v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		_ = h.close()
		return nil, false, status.Error(codes.Canceled, "the connection was closed")
	}
	m.h2 = h
	return h, true, nil
}

// drop closes h and forgets it, if it is still the connection.
func (m *memberConn) drop(h *h2conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_ = h.close()
	if m.h2 == h {
		m.h2 = nil
	}
}

// Invoke makes one unary call. Its errors are gRPC status errors, as
// grpc-go's are, so that etcd's own error values (rpctypes) match them.
func (m *memberConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	req, ok := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok || !ok2 {
		return status.Errorf(codes.Internal, "%s: %T and %T are not protobuf messages", method, args, reply)
	}
	return m.invoke(ctx, []unaryCall{{method, req, out}})[0]
}

// unaryCall is one call of a batch: its method, request and answer.
type unaryCall struct {
	method     string
	req, reply proto.Message
}

// invoke makes the calls at once on the member's connection, in one round
// trip; errs[i] is the i-th call's error, as Invoke's.
func (m *memberConn) invoke(ctx context.Context, calls []unaryCall) (errs []error) {
	errs = make([]error, len(calls))
	failAll := func(pending []int, err error) []error {
		for _, i := range pending {
			errs[i] = err
		}
		return errs
	}
	pending := make([]int, len(calls))
	reqs := make([]h2Request, len(calls))
	for i, c := range calls {
		body, headers, err := request(ctx, c.method, c.req)
		if err != nil {
			return failAll([]int{i}, err)
		}
		pending[i], reqs[i] = i, h2Request{path: c.method, headers: headers, body: body}
	}
	select {
	case m.turn <- struct{}{}:
		defer func() { <-m.turn }()
	case <-ctx.Done():
		return failAll(pending, status.FromContextError(ctx.Err()).Err())
	}
	for {
		// A call that dials gets ConnectTimeout for the dial and its
		// answers, not the sync's whole budget: a member that cannot be
		// reached holds one of Metacontroller's few workers for as long as
		// the hook waits on it, and one that is up connects and answers in
		// milliseconds. Its kept connection may turn out dead, too.
		connecting, cancel := context.WithTimeout(ctx, ConnectTimeout)
		h, fresh, err := m.take(connecting)
		if err != nil {
			cancel()
			return failAll(pending, err)
		}
		callCtx := ctx
		if fresh {
			callCtx = connecting
		}
		batch := make([]h2Request, len(pending))
		for j, i := range pending {
			batch[j] = reqs[i]
		}
		answers, callErrs, err := h.calls(callCtx, m.host, batch)
		if err != nil {
			// A connection that failed, or stalled past the deadline (as a
			// partition leaves one), is closed: the next call dials afresh.
			m.drop(h)
			switch {
			case expired(callCtx):
				err = status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
			case callCtx.Err() != nil:
				err = status.FromContextError(callCtx.Err()).Err()
			default:
				err = status.Errorf(codes.Unavailable, "%s: %v", calls[pending[0]].method, err)
			}
			cancel()
			return failAll(pending, err)
		}
		if h.goingAway {
			m.drop(h)
		}
		var again []int
		for j, i := range pending {
			var reset http2.StreamError
			switch err := callErrs[j]; {
			case err == nil:
				errs[i] = answers[j].decode(calls[i].reply)
			case errors.Is(err, errNotProcessed) && !fresh:
				// The member never started it: make it again, once, on a
				// new connection.
				again = append(again, i)
			case errors.As(err, &reset):
				// The member ended this call alone; the connection is fine.
				errs[i] = status.Errorf(resetCode(callCtx, reset.Code), "%s: %v", calls[i].method, err)
			default:
				errs[i] = status.Errorf(codes.Unavailable, "%s: %v", calls[i].method, err)
			}
		}
		cancel()
		if len(again) == 0 {
			return errs
		}
		pending = again
	}
}

// NewStream refuses: the hook makes no streaming call (snapshots are taken
// by the backup agent, with etcd's own client).
func (m *memberConn) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Errorf(codes.Unimplemented, "%s: the hook makes no streaming call", method)
}
