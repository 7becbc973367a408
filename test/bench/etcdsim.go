package bench

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/internal/testenv"
	"github.com/etcdhook/etcd-hook/plan"
)

// The reads a steady sync may make, as etcdSim counts them.
const (
	rpcStatus           = "Status"
	rpcListLinearizable = "MemberList (linearizable)"
	rpcListSerializable = "MemberList (serializable)"
)

// The methods of those reads; the generated code has no constants for them.
const (
	methodMemberList = "/etcdserverpb.Cluster/MemberList"
	methodStatus     = "/etcdserverpb.Maintenance/Status"
)

// What every simulated member reports: a settled cluster, whose raft term
// and index do not move because nothing is written to it.
const (
	simRaftTerm  = 2
	simRaftIndex = 1000
	simDBSize    = 1 << 20
)

// etcdSim answers, from one gRPC server, the reads of many steady 3-member
// etcd clusters: a thousand etcd processes do not fit on the machine. It
// tells clusters and members apart by each call's :authority, the member's
// client URL as the hook dials it (<pod>.<cluster>.<namespace>.svc:2379),
// so the hook cannot tell the difference from a fleet of separate
// clusters. Its clusters never change: any call other than the reads
// (a MemberAdd, a MoveLeader...) is refused and recorded as unexpected,
// and so is a call for a member it does not know.
type etcdSim struct {
	pb.UnimplementedClusterServer
	pb.UnimplementedMaintenanceServer

	// Filled by addCluster before serve, read-only after.
	clusters map[string]*simCluster // by "<cluster>.<namespace>"
	// tls are the server configurations of the clusters with spec.TLS, by
	// the same key: their members' server certificate, and client
	// certificates required and checked against their own CA.
	tls map[string]*tls.Config

	server   *grpc.Server
	accepted atomic.Int64

	mu         sync.Mutex
	calls      map[string]int64
	unexpected map[string]int64
}

type simCluster struct {
	id      uint64
	members []*pb.Member // members[0] is the leader
}

// simCounts is what etcdSim has served since it started.
type simCounts struct {
	calls      map[string]int64
	unexpected map[string]int64
	conns      int64 // connections accepted
}

func newEtcdSim() *etcdSim {
	return &etcdSim{clusters: map[string]*simCluster{}, tls: map[string]*tls.Config{}, calls: map[string]int64{}, unexpected: map[string]int64{}}
}

// addCluster adds a fleet cluster, whose members are its Pods, with the
// URLs the hook renders for them. A sim serves either plain clusters or
// TLS ones (serve or serveTLS).
func (s *etcdSim) addCluster(fc fleetCluster) {
	addr := fc.addresses()
	c := &simCluster{id: simID("cluster/" + fleetNamespace + "/" + fc.name)}
	for _, pod := range fc.members {
		c.members = append(c.members, &pb.Member{
			ID:         simID("member/" + pod),
			Name:       pod,
			PeerURLs:   []string{addr.PeerURL(pod)},
			ClientURLs: []string{addr.ClientURL(pod)},
		})
	}
	key := fc.name + "." + fleetNamespace
	s.clusters[key] = c
	if fc.tls != nil {
		s.tls[key] = &tls.Config{
			Certificates: []tls.Certificate{fc.tls.serverCert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    fc.tls.clientCAs,
			MinVersion:   tls.VersionTLS12,
		}
	}
}

// simID derives a stable, non-zero ID (etcd never uses 0) from a name.
func simID(name string) uint64 {
	sum := sha256.Sum256([]byte(name))
	return binary.BigEndian.Uint64(sum[:8]) | 1
}

// serve answers on every listener until stop, over plain HTTP/2.
func (s *etcdSim) serve(ls ...net.Listener) { s.serveWith(ls) }

// serveTLS answers on every listener until stop over TLS, as members with
// spec.TLS do: each cluster's members with its own server certificate,
// chosen by the member name the hook dials (SNI), and only to a client
// certificate its CA signed.
func (s *etcdSim) serveTLS(ls ...net.Listener) {
	s.serveWith(ls, grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			// <pod>.<cluster>.<namespace>.svc
			_, rest, _ := strings.Cut(hello.ServerName, ".")
			if cfg, ok := s.tls[strings.TrimSuffix(rest, ".svc")]; ok {
				return cfg, nil
			}
			s.recordUnexpected("TLS handshake for unknown member " + hello.ServerName)
			return nil, fmt.Errorf("etcdsim: no TLS member %q", hello.ServerName)
		},
	})))
}

func (s *etcdSim) serveWith(ls []net.Listener, opts ...grpc.ServerOption) {
	s.server = grpc.NewServer(append(opts,
		grpc.ChainUnaryInterceptor(s.recordUnexpectedUnary),
		// Every streaming call is unexpected. This interceptor also sees
		// the calls of services that are not registered at all (KV, Watch,
		// health...), which reach it through the unknown-service handler.
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			s.recordUnexpected(info.FullMethod)
			return handler(srv, ss)
		}),
		grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
			return status.Error(codes.Unimplemented, "etcdsim serves the Cluster and Maintenance reads only")
		}),
	)...)
	pb.RegisterClusterServer(s.server, s)
	pb.RegisterMaintenanceServer(s.server, s)
	for _, l := range ls {
		go func() { _ = s.server.Serve(testenv.CountingListener{Listener: l, Accepted: &s.accepted}) }()
	}
}

func (s *etcdSim) stop() { s.server.Stop() }

func (s *etcdSim) recordUnexpectedUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	switch info.FullMethod {
	case methodMemberList, methodStatus:
	default:
		s.recordUnexpected(info.FullMethod)
	}
	return handler(ctx, req)
}

func (s *etcdSim) record(call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[call]++
}

func (s *etcdSim) recordUnexpected(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unexpected[what]++
}

func (s *etcdSim) counts() simCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return simCounts{calls: maps.Clone(s.calls), unexpected: maps.Clone(s.unexpected), conns: s.accepted.Load()}
}

// since is what was served between before and c.
func (c simCounts) since(before simCounts) simCounts {
	out := simCounts{calls: map[string]int64{}, unexpected: map[string]int64{}, conns: c.conns - before.conns}
	for k, v := range c.calls {
		out.calls[k] = v - before.calls[k]
	}
	for k, v := range c.unexpected {
		if d := v - before.unexpected[k]; d > 0 {
			out.unexpected[k] = d
		}
	}
	return out
}

// err lists the unexpected calls: a steady cluster must only be read.
func (c simCounts) err() error {
	if len(c.unexpected) == 0 {
		return nil
	}
	var what []string
	for _, k := range slices.Sorted(maps.Keys(c.unexpected)) {
		what = append(what, fmt.Sprintf("%s (%d)", k, c.unexpected[k]))
	}
	return fmt.Errorf("etcd got calls a steady cluster must not get: %s", strings.Join(what, ", "))
}

// member finds the cluster and member a call is addressed to.
func (s *etcdSim) member(ctx context.Context) (*simCluster, *pb.Member, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var authority string
	if v := md.Get(":authority"); len(v) > 0 {
		authority = v[0]
	}
	if c, m := s.lookup(authority); m != nil {
		return c, m, nil
	}
	s.recordUnexpected("call for unknown member " + authority)
	return nil, nil, status.Errorf(codes.NotFound, "etcdsim: no member at %q", authority)
}

// lookup parses <pod>.<cluster>.<namespace>.svc:2379, or the host alone:
// over TLS, gRPC sends the server name the hook checks the certificate
// against as the authority.
func (s *etcdSim) lookup(authority string) (*simCluster, *pb.Member) {
	host := authority
	if h, port, err := net.SplitHostPort(authority); err == nil {
		if port != strconv.Itoa(plan.ClientPort) {
			return nil, nil
		}
		host = h
	}
	pod, rest, _ := strings.Cut(host, ".")
	key, ok := strings.CutSuffix(rest, ".svc")
	if c := s.clusters[key]; ok && c != nil {
		for _, m := range c.members {
			if m.Name == pod {
				return c, m
			}
		}
	}
	return nil, nil
}

func header(c *simCluster, m *pb.Member) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: c.id, MemberId: m.ID, Revision: 1, RaftTerm: simRaftTerm}
}

// MemberList answers the same whether linearizable or not: the cluster is
// settled, so a local read is as fresh as a quorum read.
func (s *etcdSim) MemberList(ctx context.Context, req *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	c, m, err := s.member(ctx)
	if err != nil {
		return nil, err
	}
	if req.Linearizable {
		s.record(rpcListLinearizable)
	} else {
		s.record(rpcListSerializable)
	}
	return &pb.MemberListResponse{Header: header(c, m), Members: c.members}, nil
}

func (s *etcdSim) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	c, m, err := s.member(ctx)
	if err != nil {
		return nil, err
	}
	s.record(rpcStatus)
	return &pb.StatusResponse{
		Header:           header(c, m),
		Version:          etcdtest.DefaultVersion,
		DbSize:           simDBSize,
		DbSizeInUse:      simDBSize,
		Leader:           c.members[0].ID,
		RaftIndex:        simRaftIndex,
		RaftAppliedIndex: simRaftIndex,
		RaftTerm:         simRaftTerm,
	}, nil
}
