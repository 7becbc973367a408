package etcdclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	gosync "sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/sync"
)

// cluster holds one client per member endpoint. Every call is aimed at a
// particular member: a learner refuses most RPCs, so a balanced client
// that may pick the learner would fail at random, and clientv3's own
// Status dials a fresh connection on every call.
type cluster struct {
	mu        gosync.Mutex
	endpoints []string
	each      map[string]*clientv3.Client
	newClient func(endpoints []string) (*clientv3.Client, error)
}

func (c *cluster) setEndpoints(endpoints []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ep, cli := range c.each {
		if !slices.Contains(endpoints, ep) {
			_ = cli.Close()
			delete(c.each, ep)
		}
	}
	c.endpoints = endpoints
	return nil
}

func (c *cluster) endpointClient(ep string) (*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cli, ok := c.each[ep]; ok {
		return cli, nil
	}
	cli, err := c.newClient([]string{ep})
	if err != nil {
		return nil, err
	}
	c.each[ep] = cli
	return cli, nil
}

func (c *cluster) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cli := range c.each {
		_ = cli.Close()
	}
	c.each = map[string]*clientv3.Client{}
}

type endpointStatus struct {
	endpoint string
	resp     *pb.StatusResponse
	err      error
}

func (st endpointStatus) voter() bool { return st.err == nil && st.resp != nil && !st.resp.IsLearner }

// lister reports whether the member can be asked for the linearizable
// member list: a voter that knows a leader. A voter without one (cut off
// from its peers, or back from a partition and not yet heard from the
// leader) answers Status at once but holds a linearizable read until the
// time is up, and the list would then be read locally and marked stale: a
// quorum that is there reported lost.
func (st endpointStatus) lister() bool { return st.voter() && st.resp.Leader != 0 }

func (c *cluster) status(ctx context.Context, ep string) endpointStatus {
	cli, err := c.endpointClient(ep)
	if err != nil {
		return endpointStatus{endpoint: ep, err: err}
	}
	resp, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Status(ctx, &pb.StatusRequest{})
	if err != nil && ctx.Err() != nil {
		c.forget(ep, cli)
	}
	return endpointStatus{endpoint: ep, resp: resp, err: err}
}

// forget closes the client of an endpoint that did not answer in time, so
// that the next sync dials it afresh. Its connection may be stalled rather
// than broken: after a network partition heals, TCP retransmits what was
// sent into it only as its backoff allows, tens of seconds after a long
// cut, and gRPC's keepalive pings only while a call is in flight. Kept, it
// would hide a member that is back from every sync until then.
func (c *cluster) forget(ep string, cli *clientv3.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.each[ep] == cli {
		delete(c.each, ep)
		_ = cli.Close()
	}
}

type listResult struct {
	resp *clientv3.MemberListResponse
	err  error
}

// Membership asks every endpoint for its status at once, and the first
// voter that answers with a leader for the member list, while the others
// are still answering: a member that does not answer costs the timeout
// once, in parallel with the rest, not once per call.
func (c *cluster) Membership(ctx context.Context) (*sync.Membership, error) {
	ctx, cancel := bounded(ctx, ObserveTimeout)
	defer cancel()
	c.mu.Lock()
	endpoints := slices.Clone(c.endpoints)
	c.mu.Unlock()

	results := make(chan endpointStatus, len(endpoints))
	for _, ep := range endpoints {
		go func() { results <- c.status(ctx, ep) }()
	}
	listed := make(chan listResult, 1)
	listing := false
	statuses := make([]endpointStatus, 0, len(endpoints))
	for range endpoints {
		st := <-results
		statuses = append(statuses, st)
		if !listing && st.lister() {
			listing = true
			go func() {
				resp, err := c.memberList(ctx, st.endpoint)
				listed <- listResult{resp, err}
			}()
		}
	}
	listErr := errors.New("no voting member that knows a leader answered")
	if listing {
		res := <-listed
		if res.err == nil {
			return membershipFrom(res.resp.Members, statuses), nil
		}
		listErr = res.err
	}
	// Without a quorum a linearizable list cannot be read, but a member
	// that is up still knows the membership: good enough to report which
	// members are missing, never to act on.
	if list := c.localList(ctx, statuses); list != nil {
		ms := membershipFrom(list.Members, statuses)
		ms.Stale = true
		return ms, nil
	}
	return nil, wrap("member list", listErr)
}

func (c *cluster) memberList(ctx context.Context, ep string, opts ...clientv3.OpOption) (*clientv3.MemberListResponse, error) {
	cli, err := c.endpointClient(ep)
	if err != nil {
		return nil, err
	}
	return cli.MemberList(ctx, opts...)
}

func (c *cluster) localList(parent context.Context, statuses []endpointStatus) *clientv3.MemberListResponse {
	slices.SortStableFunc(statuses, func(a, b endpointStatus) int {
		if a.voter() && !b.voter() {
			return -1
		}
		return 0
	})
	for _, st := range statuses {
		if st.err != nil {
			continue
		}
		// The linearizable attempt may have used up the budget; a local
		// read answers at once or not at all.
		ctx, cancel := bounded(context.WithoutCancel(parent), CallTimeout/4)
		list, err := c.memberList(ctx, st.endpoint, clientv3.WithSerializable())
		cancel()
		if err == nil {
			return list
		}
	}
	return nil
}

func membershipFrom(members []*pb.Member, statuses []endpointStatus) *sync.Membership {
	byID := map[uint64]*pb.StatusResponse{}
	leaderVotes := map[uint64]int{}
	for _, st := range statuses {
		if st.err != nil || st.resp == nil || st.resp.Header == nil {
			continue
		}
		byID[st.resp.Header.MemberId] = st.resp
		if st.resp.Leader != 0 {
			leaderVotes[st.resp.Leader]++
		}
	}
	ms := &sync.Membership{Members: make([]sync.Member, 0, len(members))}
	for _, m := range members {
		member := toMember(m)
		if st, ok := byID[m.ID]; ok {
			member.Reachable = true
			member.Version = st.Version
			member.RaftIndex = st.RaftIndex
			member.Errors = st.Errors
			// A member that calls itself the leader is the authority.
			if st.Leader == m.ID {
				leaderVotes[m.ID] += len(statuses) + 1
			}
		}
		ms.Members = append(ms.Members, member)
	}
	best := 0
	for id, votes := range leaderVotes {
		if votes > best || (votes == best && id < ms.LeaderID) {
			ms.LeaderID, best = id, votes
		}
	}
	return ms
}

func toMember(m *pb.Member) sync.Member {
	return sync.Member{
		ID:         m.ID,
		Name:       m.Name,
		PeerURLs:   slices.Clone(m.PeerURLs),
		ClientURLs: slices.Clone(m.ClientURLs),
		IsLearner:  m.IsLearner,
	}
}

func toMembers(ms []*pb.Member) []sync.Member {
	out := make([]sync.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, toMember(m))
	}
	return out
}

// Apply makes the change through the leader's endpoint, which the planner
// names from the observed membership. Each call is idempotent against what
// etcd already holds: removing a member that is gone, or adding a peer URL
// that is already there, reads back the list instead of failing.
func (c *cluster) Apply(ctx context.Context, a sync.Action) ([]sync.Member, error) {
	ctx, cancel := bounded(ctx, CallTimeout)
	defer cancel()
	cli, err := c.endpointClient(a.LeaderEndpoint)
	if err != nil {
		return nil, wrap(string(a.Type), err)
	}
	members, err := apply(ctx, cli, a)
	if isEtcdError(err, rpctypes.ErrUnhealthy) || isEtcdError(err, rpctypes.ErrMemberNotEnoughStarted) {
		// etcd's own guard: a peer connected for less than its health
		// interval does not count yet. The next sync tries again.
		return nil, fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	return members, err
}

func apply(ctx context.Context, cli *clientv3.Client, a sync.Action) ([]sync.Member, error) {
	switch a.Type {
	case sync.ActionAddMember:
		add := cli.MemberAddAsLearner
		if !a.AsLearner {
			add = cli.MemberAdd
		}
		resp, err := add(ctx, []string{a.PeerURL})
		if isEtcdError(err, rpctypes.ErrPeerURLExist) || isEtcdError(err, rpctypes.ErrMemberExist) {
			// A retried add whose first attempt went through: etcd derives
			// the member ID from the peer URL, so both errors mean the same.
			return listContaining(ctx, cli, a.PeerURL, err)
		}
		if err != nil {
			return nil, wrap("member add", err)
		}
		return toMembers(resp.Members), nil
	case sync.ActionPromoteMember:
		resp, err := cli.MemberPromote(ctx, a.MemberID)
		if isEtcdError(err, rpctypes.ErrMemberLearnerNotReady) {
			return nil, wrap("member promote", ErrNotReady)
		}
		if isEtcdError(err, rpctypes.ErrMemberNotLearner) {
			return list(ctx, cli)
		}
		if err != nil {
			return nil, wrap("member promote", err)
		}
		return toMembers(resp.Members), nil
	case sync.ActionRemoveMember:
		resp, err := cli.MemberRemove(ctx, a.MemberID)
		if isEtcdError(err, rpctypes.ErrMemberNotFound) {
			return list(ctx, cli)
		}
		if err != nil {
			return nil, wrap("member remove", err)
		}
		return toMembers(resp.Members), nil
	case sync.ActionMoveLeader:
		if _, err := cli.MoveLeader(ctx, a.MemberID); err != nil {
			return nil, wrap("move leader", err)
		}
		return list(ctx, cli)
	}
	return nil, errors.New("unknown membership action " + string(a.Type))
}

func list(ctx context.Context, cli *clientv3.Client) ([]sync.Member, error) {
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, wrap("member list", err)
	}
	return toMembers(resp.Members), nil
}

func listContaining(ctx context.Context, cli *clientv3.Client, peerURL string, cause error) ([]sync.Member, error) {
	members, err := list(ctx, cli)
	if err != nil {
		return nil, err
	}
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peerURL) {
			return members, nil
		}
	}
	return nil, wrap("member add", cause)
}

// isEtcdError matches an etcd server error whether or not the client
// converted it to its typed form.
func isEtcdError(err, target error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, target) || rpctypes.ErrorDesc(err) == target.Error()
}
