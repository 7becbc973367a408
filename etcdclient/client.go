package etcdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/membership"
)

// cluster is one sync's view of a cluster's member endpoints. Every call is
// aimed at a particular member: a learner refuses most RPCs, so a balanced
// client that may pick the learner would fail at random.
type cluster struct {
	conns     *conns
	endpoints []string
	// tlsID and tls are the client certificate, for https endpoints.
	tlsID string
	tls   *tls.Config
	// statuses are what the members said in the last Membership.
	statuses []endpointStatus
}

// member runs fn against one endpoint's connection. A call that has to
// dial is bounded by ConnectTimeout (memberConn.invoke).
func (c *cluster) member(ctx context.Context, endpoint string, fn func(context.Context, *conn) error) error {
	cn, err := c.conns.acquire(endpoint, c.tlsID, c.tls)
	if err != nil {
		return err
	}
	defer c.conns.release(cn)
	return fn(ctx, cn)
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

func (c *cluster) memberList(ctx context.Context, endpoint string, read consistency) (*clientv3.MemberListResponse, error) {
	var resp *clientv3.MemberListResponse
	err := c.member(ctx, endpoint, func(ctx context.Context, cn *conn) error {
		var opts []clientv3.OpOption
		if read == local {
			opts = append(opts, clientv3.WithSerializable())
		}
		var err error
		resp, err = clientv3.NewClusterFromClusterClient(pb.NewClusterClient(cn.cc), nil).MemberList(ctx, opts...)
		return err
	})
	return resp, err
}

type listResult struct {
	resp *clientv3.MemberListResponse
	err  error
}

// Membership asks every endpoint for its status at once and, in the same
// round trip, the first endpoint for its own copy of the member list: a
// member that does not answer costs the timeout once, in parallel with
// the rest, not once per call.
func (c *cluster) Membership(ctx context.Context) (*membership.Membership, error) {
	ctx, cancel := bounded(ctx, ObserveTimeout)
	defer cancel()
	statuses, listed := c.readStatuses(ctx)
	c.statuses = statuses
	return c.membership(ctx, statuses, listed, local)
}

// Confirm reads the list again through the quorum, from the first voter
// that knows a leader. What the members said about themselves in the last
// Membership holds: asking again would wait once more on a member that
// does not answer.
func (c *cluster) Confirm(ctx context.Context) (*membership.Membership, error) {
	if c.statuses == nil {
		if _, err := c.Membership(ctx); err != nil {
			return nil, err
		}
	}
	ctx, cancel := bounded(ctx, ObserveTimeout)
	defer cancel()
	var listed <-chan listResult
	if i := slices.IndexFunc(c.statuses, endpointStatus.lister); i >= 0 {
		listed = c.listAsync(ctx, c.statuses[i].endpoint, linearizable)
	}
	return c.membership(ctx, c.statuses, listed, linearizable)
}

func (c *cluster) membership(ctx context.Context, statuses []endpointStatus, listed <-chan listResult, read consistency) (*membership.Membership, error) {
	// Without a voter that knows a leader there is no quorum to read
	// through: the list is then one member's view, marked stale.
	stale := !slices.ContainsFunc(statuses, endpointStatus.lister)
	listErr := errors.New("no voting member that knows a leader answered")
	if listed != nil {
		res := <-listed
		if res.err == nil {
			ms := membershipFrom(res.resp, statuses)
			ms.Stale = stale
			return ms, nil
		}
		listErr = res.err
	}
	// A member that is up still knows the membership without a quorum:
	// good enough to report which members are missing, never to act on.
	if list := c.localList(ctx, statuses); list != nil {
		ms := membershipFrom(list, statuses)
		ms.Stale = stale || read == linearizable
		return ms, nil
	}
	return nil, wrap("member list", listErr)
}

// readStatuses asks every endpoint for its status and, in the same round
// trip as its status, the first endpoint for its own copy of the list.
func (c *cluster) readStatuses(ctx context.Context) ([]endpointStatus, <-chan listResult) {
	results := make(chan endpointStatus, len(c.endpoints))
	listed := make(chan listResult, 1)
	for i, ep := range c.endpoints {
		go func() {
			st, list := c.status(ctx, ep, i == 0)
			if i == 0 {
				listed <- list
			}
			results <- st
		}()
	}
	statuses := make([]endpointStatus, 0, len(c.endpoints))
	for range c.endpoints {
		statuses = append(statuses, <-results)
	}
	if len(c.endpoints) == 0 {
		return statuses, nil
	}
	return statuses, listed
}

// status asks one endpoint for its status and, with list, its own copy of
// the member list at once.
func (c *cluster) status(ctx context.Context, endpoint string, list bool) (endpointStatus, listResult) {
	st := endpointStatus{endpoint: endpoint, resp: &pb.StatusResponse{}}
	var listed listResult
	calls := []unaryCall{{methodStatus, &pb.StatusRequest{}, st.resp}}
	if list {
		listed.resp = &clientv3.MemberListResponse{}
		calls = append(calls, unaryCall{methodMemberList, &pb.MemberListRequest{Linearizable: false}, (*pb.MemberListResponse)(listed.resp)})
	}
	asked := false
	st.err = c.member(ctx, endpoint, func(ctx context.Context, cn *conn) error {
		asked = true
		errs := cn.cc.invoke(ctx, calls)
		if list {
			listed.err = rpctypes.Error(errs[1])
		}
		return errs[0]
	})
	if st.err != nil {
		st.resp = nil
	}
	if !asked {
		listed.err = st.err
	}
	if listed.err != nil {
		listed.resp = nil
	}
	return st, listed
}

// The methods of the steady read, as etcd's generated clients name them.
const (
	methodStatus     = "/etcdserverpb.Maintenance/Status"
	methodMemberList = "/etcdserverpb.Cluster/MemberList"
)

func (c *cluster) listAsync(ctx context.Context, endpoint string, read consistency) <-chan listResult {
	listed := make(chan listResult, 1)
	go func() {
		resp, err := c.memberList(ctx, endpoint, read)
		listed <- listResult{resp, err}
	}()
	return listed
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
		// The first attempt may have used up the budget; a local read
		// answers at once or not at all.
		ctx, cancel := bounded(context.WithoutCancel(parent), CallTimeout/4)
		list, err := c.memberList(ctx, st.endpoint, local)
		cancel()
		if err == nil {
			return list
		}
	}
	return nil
}

func membershipFrom(list *clientv3.MemberListResponse, statuses []endpointStatus) *membership.Membership {
	members := list.Members
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
	ms := &membership.Membership{Members: make([]membership.Member, 0, len(members))}
	if list.Header != nil {
		ms.ClusterID = list.Header.ClusterId
	}
	for _, m := range members {
		member := toMember(m)
		if st, ok := byID[m.ID]; ok {
			member.Reachable = true
			member.Version = st.Version
			member.RaftIndex = st.RaftIndex
			member.Errors = st.Errors
			member.DBSize, member.DBSizeInUse = st.DbSize, st.DbSizeInUse
			member.RaftAppliedIndex, member.Revision = st.RaftAppliedIndex, st.Header.Revision
			member.StorageVersion = st.StorageVersion
			if d := st.DowngradeInfo; d != nil && d.Enabled {
				member.DowngradeTarget = d.TargetVersion
			}
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

func toMember(m *pb.Member) membership.Member {
	return membership.Member{
		ID:         m.ID,
		Name:       m.Name,
		PeerURLs:   slices.Clone(m.PeerURLs),
		ClientURLs: slices.Clone(m.ClientURLs),
		IsLearner:  m.IsLearner,
	}
}

func toMembers(ms []*pb.Member) []membership.Member {
	out := make([]membership.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, toMember(m))
	}
	return out
}

// consistency is how a member list is read: from one member's own copy, or
// through the leader and a quorum.
type consistency int

const (
	local consistency = iota
	linearizable
)
