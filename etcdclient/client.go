package etcdclient

import (
	"context"
	"errors"
	"slices"
	gosync "sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/sync"
)

// cluster holds one balanced client for cluster-wide calls and one client
// per endpoint for the calls that must reach a particular member (status,
// leader moves). clientv3's own Status dials a fresh connection each time.
type cluster struct {
	mu        gosync.Mutex
	endpoints []string
	all       *clientv3.Client
	each      map[string]*clientv3.Client
	newClient func(endpoints []string) (*clientv3.Client, error)
}

func (c *cluster) setEndpoints(endpoints []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all == nil {
		cli, err := c.newClient(endpoints)
		if err != nil {
			return err
		}
		c.all = cli
	} else if !slices.Equal(c.endpoints, endpoints) {
		c.all.SetEndpoints(endpoints...)
	}
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
	if c.all != nil {
		_ = c.all.Close()
	}
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

func (c *cluster) status(ctx context.Context, ep string) endpointStatus {
	cli, err := c.endpointClient(ep)
	if err != nil {
		return endpointStatus{endpoint: ep, err: err}
	}
	resp, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Status(ctx, &pb.StatusRequest{})
	return endpointStatus{endpoint: ep, resp: resp, err: err}
}

// Membership reads the list and every member's status at once: a member
// that does not answer costs the timeout once, not once per step.
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
	list, listErr := c.all.MemberList(ctx)
	statuses := make([]endpointStatus, 0, len(endpoints))
	for range endpoints {
		statuses = append(statuses, <-results)
	}

	stale := false
	if listErr != nil {
		// Without a quorum a linearizable list cannot be read, but a member
		// that is up still knows the membership: good enough to say which
		// members are missing.
		list = c.localList(ctx, statuses)
		if list == nil {
			return nil, wrap("member list", listErr)
		}
		stale = true
	}
	ms := membershipFrom(list.Members, statuses)
	ms.Stale = stale
	return ms, nil
}

func (c *cluster) localList(parent context.Context, statuses []endpointStatus) *clientv3.MemberListResponse {
	for _, st := range statuses {
		if st.err != nil {
			continue
		}
		cli, err := c.endpointClient(st.endpoint)
		if err != nil {
			continue
		}
		ctx, cancel := bounded(context.WithoutCancel(parent), CallTimeout/4)
		list, err := cli.MemberList(ctx, clientv3.WithSerializable())
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

// Apply makes the change. Each call is idempotent against what etcd
// already holds: removing a member that is gone, or adding a peer URL that
// is already there, reads back the list instead of failing.
func (c *cluster) Apply(ctx context.Context, a sync.Action) ([]sync.Member, error) {
	ctx, cancel := bounded(ctx, CallTimeout)
	defer cancel()
	switch a.Type {
	case sync.ActionAddMember:
		add := c.all.MemberAddAsLearner
		if !a.AsLearner {
			add = c.all.MemberAdd
		}
		resp, err := add(ctx, []string{a.PeerURL})
		if isEtcdError(err, rpctypes.ErrPeerURLExist) {
			return c.list(ctx)
		}
		if err != nil {
			return nil, wrap("member add", err)
		}
		return toMembers(resp.Members), nil
	case sync.ActionPromoteMember:
		resp, err := c.all.MemberPromote(ctx, a.MemberID)
		if isEtcdError(err, rpctypes.ErrMemberLearnerNotReady) {
			return nil, wrap("member promote", ErrNotReady)
		}
		if isEtcdError(err, rpctypes.ErrMemberNotLearner) {
			return c.list(ctx)
		}
		if err != nil {
			return nil, wrap("member promote", err)
		}
		return toMembers(resp.Members), nil
	case sync.ActionRemoveMember:
		resp, err := c.all.MemberRemove(ctx, a.MemberID)
		if isEtcdError(err, rpctypes.ErrMemberNotFound) {
			return c.list(ctx)
		}
		if err != nil {
			return nil, wrap("member remove", err)
		}
		return toMembers(resp.Members), nil
	case sync.ActionMoveLeader:
		cli, err := c.endpointClient(a.LeaderEndpoint)
		if err != nil {
			return nil, wrap("move leader", err)
		}
		if _, err := cli.MoveLeader(ctx, a.MemberID); err != nil {
			return nil, wrap("move leader", err)
		}
		return c.list(ctx)
	}
	return nil, errors.New("unknown membership action " + string(a.Type))
}

func (c *cluster) list(ctx context.Context) ([]sync.Member, error) {
	resp, err := c.all.MemberList(ctx)
	if err != nil {
		return nil, wrap("member list", err)
	}
	return toMembers(resp.Members), nil
}

// isEtcdError matches an etcd server error whether or not the client
// converted it to its typed form.
func isEtcdError(err, target error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, target) || rpctypes.ErrorDesc(err) == target.Error()
}
