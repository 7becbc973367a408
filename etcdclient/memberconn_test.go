package etcdclient

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/internal/testenv"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// statusServer is a grpc-go server, as etcd runs, whose Status answers
// what the test sets.
type statusServer struct {
	pb.UnimplementedMaintenanceServer
	answer   *pb.StatusResponse
	err      error
	deadline atomic.Value // time.Duration left when the call arrived
	accepted atomic.Int64
}

func (s *statusServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	if d, ok := ctx.Deadline(); ok {
		s.deadline.Store(time.Until(d))
	}
	return s.answer, s.err
}

func startStatusServer(t *testing.T, s *statusServer) *memberConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterMaintenanceServer(srv, s)
	go func() { _ = srv.Serve(testenv.CountingListener{Listener: ln, Accepted: &s.accepted}) }()
	t.Cleanup(srv.Stop)
	m, err := newMemberConn("http://"+ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func TestMemberConnCallsAGRPCServer(t *testing.T) {
	want := &pb.StatusResponse{Header: &pb.ResponseHeader{MemberId: 7, Revision: 42}, Version: "3.7.3", Leader: 7, Errors: []string{"etcdserver: mvcc: database space exceeded"}}
	s := &statusServer{answer: want}
	m := startStatusServer(t, s)
	m.mu.Lock()
	dialed := m.h2 != nil
	m.mu.Unlock()
	if dialed || s.accepted.Load() != 0 {
		t.Fatal("a connection is up before any call: the dial must wait for the first one")
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		got, err := pb.NewMaintenanceClient(m).Status(ctx, &pb.StatusRequest{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(want, got) {
			t.Fatalf("Status answered %v, want %v", got, want)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Errorf("%d connections for 3 calls, want 1 kept", n)
	}
	// The member stops working when the hook stops waiting.
	left, _ := s.deadline.Load().(time.Duration)
	if left <= 0 || left > 700*time.Millisecond {
		t.Errorf("the server saw %v left of the call's 700ms, want the deadline passed on (grpc-timeout)", left)
	}
}

func TestMemberConnErrorsAreGRPCStatuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server error
		check  func(error) bool
		reason string
	}{
		{
			name:   "etcd error",
			server: rpctypes.ErrGRPCLearnerNotReady,
			check:  func(err error) bool { return rpctypes.Error(err) == rpctypes.ErrMemberLearnerNotReady },
			reason: "the hook tells etcd's refusals apart by rpctypes, as with grpc-go",
		},
		{
			name:   "message to escape",
			server: status.Error(codes.FailedPrecondition, "100% ünïcode\nline"),
			check: func(err error) bool {
				s, _ := status.FromError(err)
				return s.Code() == codes.FailedPrecondition && s.Message() == "100% ünïcode\nline"
			},
			reason: "grpc-message is percent-encoded on the wire, and read back as sent",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startStatusServer(t, &statusServer{err: tc.server})
			_, err := pb.NewMaintenanceClient(m).Status(context.Background(), &pb.StatusRequest{})
			if !tc.check(err) {
				t.Errorf("got %v from a server answering %v: %s", err, tc.server, tc.reason)
			}
		})
	}
	t.Run("method the server lacks", func(t *testing.T) {
		m := startStatusServer(t, &statusServer{})
		_, err := pb.NewClusterClient(m).MemberList(context.Background(), &pb.MemberListRequest{})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("got %v, want Unimplemented", err)
		}
	})
	t.Run("stream", func(t *testing.T) {
		m := startStatusServer(t, &statusServer{})
		if _, err := pb.NewMaintenanceClient(m).Snapshot(context.Background(), &pb.SnapshotRequest{}); status.Code(err) != codes.Unimplemented {
			t.Errorf("a streaming call got %v, want Unimplemented: the hook makes none", err)
		}
	})
}

func TestMemberConnClosedDialsNothing(t *testing.T) {
	s := &statusServer{answer: &pb.StatusResponse{}}
	m := startStatusServer(t, s)
	if _, err := pb.NewMaintenanceClient(m).Status(context.Background(), &pb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	_, err := pb.NewMaintenanceClient(m).Status(context.Background(), &pb.StatusRequest{})
	if status.Code(err) != codes.Canceled {
		t.Errorf("a call on a closed connection got %v, want Canceled", err)
	}
	if n := s.accepted.Load(); n != 1 {
		t.Errorf("%d connections accepted, want 1: a closed connection must not dial again", n)
	}
}

func TestMemberConnDownMemberFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	m, err := newMemberConn("http://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	start := time.Now()
	_, err = pb.NewMaintenanceClient(m).Status(context.Background(), &pb.StatusRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a member that refuses connections got %v, want Unavailable", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a refused dial took %v, want it to fail at once", took)
	}
}

// pairServer answers Status only once MemberList has arrived: a client
// that waits for one answer before it asks the next never gets one.
type pairServer struct {
	pb.UnimplementedMaintenanceServer
	pb.UnimplementedClusterServer
	listed  chan struct{}
	listErr error
}

func (s *pairServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	select {
	case <-s.listed:
		return &pb.StatusResponse{Version: "3.7.3"}, nil
	case <-ctx.Done():
		return nil, status.Error(codes.DeadlineExceeded, "MemberList never arrived")
	}
}

func (s *pairServer) MemberList(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	close(s.listed)
	if s.listErr != nil {
		return nil, s.listErr
	}
	return &pb.MemberListResponse{Members: []*pb.Member{{ID: 1, Name: "m0"}}}, nil
}

func TestMemberConnAsksTogetherInOneRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		listErr error
		want    codes.Code
	}{
		{"both answer", nil, codes.OK},
		{"the list is refused", rpctypes.ErrGRPCMemberNotFound, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			s := &pairServer{listed: make(chan struct{}), listErr: tc.listErr}
			pb.RegisterMaintenanceServer(srv, s)
			pb.RegisterClusterServer(srv, s)
			go func() { _ = srv.Serve(ln) }()
			defer srv.Stop()
			m, err := newMemberConn("http://"+ln.Addr().String(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var st pb.StatusResponse
			var list pb.MemberListResponse
			errs := m.invoke(ctx, []unaryCall{{methodStatus, &pb.StatusRequest{}, &st}, {methodMemberList, &pb.MemberListRequest{}, &list}})
			if errs[0] != nil || st.Version != "3.7.3" {
				t.Errorf("Status: %v, %v; want it answered while the list was asked in the same round trip", &st, errs[0])
			}
			if got := status.Code(errs[1]); got != tc.want {
				t.Errorf("MemberList: %v, want %v: each call of a batch has its own answer", errs[1], tc.want)
			}
			if tc.want == codes.OK && len(list.Members) != 1 {
				t.Errorf("MemberList answered %v", &list)
			}
		})
	}
}

// A cluster moving to TLS has members on both schemes, and the hook calls
// them all with the certificate it has: a plain member is called plainly.
func TestMemberConnPlainMemberWithACertificate(t *testing.T) {
	s := &statusServer{answer: &pb.StatusResponse{Version: "3.7.3"}}
	plain := startStatusServer(t, s)
	m, err := newMemberConn("http://"+plain.host, &tls.Config{MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got, err := pb.NewMaintenanceClient(m).Status(context.Background(), &pb.StatusRequest{})
	if err != nil || got.Version != "3.7.3" {
		t.Errorf("a plain member called with a certificate at hand: %v, %v", got, err)
	}
}
