package etcdclient

import (
	"context"
	"errors"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdhook/etcd-hook/membership"
)

// Apply makes the change through the leader's endpoint, which the planner
// names from the observed membership (housekeeping: see maintain). Each call is idempotent against what
// etcd already holds: removing a member that is gone, or adding a peer URL
// that is already there, reads back the list instead of failing.
func (c *cluster) Apply(ctx context.Context, a membership.Action) ([]membership.Member, error) {
	if a.Type.Maintenance() {
		return c.maintain(ctx, a)
	}
	ctx, cancel := bounded(ctx, CallTimeout)
	defer cancel()
	var members []membership.Member
	err := c.member(ctx, a.LeaderEndpoint, func(ctx context.Context, cn *conn) error {
		var err error
		members, err = apply(ctx, leader{
			Cluster:     clientv3.NewClusterFromClusterClient(pb.NewClusterClient(cn.cc), nil),
			Maintenance: clientv3.NewMaintenanceFromMaintenanceClient(pb.NewMaintenanceClient(cn.cc), nil),
		}, a)
		return err
	})
	if isEtcdError(err, rpctypes.ErrUnhealthy) || isEtcdError(err, rpctypes.ErrMemberNotEnoughStarted) {
		// etcd's own guard: a peer connected for less than its health
		// interval does not count yet. The next sync tries again.
		return nil, fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	return members, err
}

// leader is the client API of the member that takes the change.
type leader struct {
	clientv3.Cluster
	clientv3.Maintenance
}

func apply(ctx context.Context, cli leader, a membership.Action) ([]membership.Member, error) {
	switch a.Type {
	case membership.ActionAddMember:
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
	case membership.ActionPromoteMember:
		resp, err := cli.MemberPromote(ctx, a.MemberID)
		if isEtcdError(err, rpctypes.ErrMemberLearnerNotReady) {
			return nil, wrap("member promote", ErrNotReady)
		}
		if isEtcdError(err, rpctypes.ErrMemberNotLearner) {
			return readList(ctx, cli)
		}
		if err != nil {
			return nil, wrap("member promote", err)
		}
		return toMembers(resp.Members), nil
	case membership.ActionRemoveMember:
		resp, err := cli.MemberRemove(ctx, a.MemberID)
		if isEtcdError(err, rpctypes.ErrMemberNotFound) {
			return readList(ctx, cli)
		}
		if err != nil {
			return nil, wrap("member remove", err)
		}
		return toMembers(resp.Members), nil
	case membership.ActionMoveLeader:
		if _, err := cli.MoveLeader(ctx, a.MemberID); err != nil {
			return nil, wrap("move leader", err)
		}
		return readList(ctx, cli)
	}
	return nil, errors.New("unknown membership action " + string(a.Type))
}

func readList(ctx context.Context, cli leader) ([]membership.Member, error) {
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, wrap("member list", err)
	}
	return toMembers(resp.Members), nil
}

func listContaining(ctx context.Context, cli leader, peerURL string, cause error) ([]membership.Member, error) {
	members, err := readList(ctx, cli)
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
