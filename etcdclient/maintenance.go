package etcdclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdhook/etcd-hook/membership"
)

// DefragmentWait is how long the hook waits for a defragmentation to
// answer. etcd rewrites the member's whole database, about a second per
// 70 to 250 MiB in use (measured on loopback with a local disk), which
// can outlast Metacontroller's hook timeout. etcd's handler ignores its
// caller's context (3.4 to 3.6), so a defragmentation that outlasts this
// goes on after the hook stops waiting: it counts as started, and later
// syncs see it end (the member answers Status again, its unused space
// given back).
const DefragmentWait = time.Second

// defragmentWait is DefragmentWait; tests shorten it to see a
// defragmentation outlast the wait.
var defragmentWait = DefragmentWait

// maintain makes a housekeeping action. The membership does not change,
// so the member list read first, from the leader, is the list to return:
// read afterwards, it would wait on a leader being defragmented.
func (c *cluster) maintain(ctx context.Context, a membership.Action) ([]membership.Member, error) {
	ctx, cancel := bounded(ctx, CallTimeout)
	defer cancel()
	var members []membership.Member
	err := c.member(ctx, a.LeaderEndpoint, func(ctx context.Context, cn *conn) error {
		resp, err := clientv3.NewClusterFromClusterClient(pb.NewClusterClient(cn.cc), nil).MemberList(ctx)
		if err != nil {
			return wrap("member list", err)
		}
		members = toMembers(resp.Members)
		switch a.Type {
		case membership.ActionCompact:
			return compact(ctx, cn, a.Revision)
		case membership.ActionDisarmAlarm:
			return disarmNoSpace(ctx, cn)
		case membership.ActionRaiseFence:
			return fence(ctx, cn, pb.AlarmRequest_ACTIVATE)
		case membership.ActionLiftFence:
			return fence(ctx, cn, pb.AlarmRequest_DEACTIVATE)
		case membership.ActionEnableDowngrade:
			return enableDowngrade(ctx, cn, a.Version)
		case membership.ActionCancelDowngrade:
			return cancelDowngrade(ctx, cn)
		}
		if a.Type.Auth() {
			return changeAuth(ctx, cn, a)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if a.Type == membership.ActionDefragment {
		if a.Endpoint == "" {
			return nil, errors.New("defragment: no endpoint for member " + a.Name)
		}
		err = c.member(ctx, a.Endpoint, func(ctx context.Context, cn *conn) error { return defragment(ctx, cn) })
	}
	if err != nil {
		return nil, err
	}
	return members, nil
}

// enableDowngrade asks etcd to validate a downgrade to version ("3.6"),
// then to enable it, as "etcdctl downgrade validate" and "enable" do. A
// refused validation changes nothing and its reason is etcd's own (a
// target that is not one minor below the cluster version, say). etcd then
// lowers the cluster version, and each member its storage version; the
// planner replaces binaries only once every member reports that.
func enableDowngrade(ctx context.Context, cn *conn, version string) error {
	mc := pb.NewMaintenanceClient(cn.cc)
	_, err := mc.Downgrade(ctx, &pb.DowngradeRequest{Action: pb.DowngradeRequest_VALIDATE, Version: version})
	if isEtcdError(err, rpctypes.ErrDowngradeInProcess) {
		// A retried step whose first attempt went through.
		return nil
	}
	if err != nil {
		return wrap("downgrade validate "+version, err)
	}
	_, err = mc.Downgrade(ctx, &pb.DowngradeRequest{Action: pb.DowngradeRequest_ENABLE, Version: version})
	if isEtcdError(err, rpctypes.ErrDowngradeInProcess) {
		return nil
	}
	return wrap("downgrade enable "+version, err)
}

// cancelDowngrade ends an enabled downgrade: the cluster version then
// follows the members' binaries again. None in flight is what was asked.
func cancelDowngrade(ctx context.Context, cn *conn) error {
	_, err := pb.NewMaintenanceClient(cn.cc).Downgrade(ctx, &pb.DowngradeRequest{Action: pb.DowngradeRequest_CANCEL})
	if isEtcdError(err, rpctypes.ErrNoInflightDowngrade) {
		return nil
	}
	return wrap("downgrade cancel", err)
}

// compact compacts the history up to revision, which etcd applies on
// every member through the log. A revision compacted already (a retried
// step) is what was asked for. The physical part, giving the pages back
// to the database's free list, goes on in the background; later syncs see
// dbSizeInUse fall.
func compact(ctx context.Context, cn *conn, revision int64) error {
	_, err := pb.NewKVClient(cn.cc).Compact(ctx, &pb.CompactionRequest{Revision: revision})
	if isEtcdError(err, rpctypes.ErrCompacted) {
		return nil
	}
	return wrap(fmt.Sprintf("compact to revision %d", revision), err)
}

// defragment starts a defragmentation of the member cn reaches, waiting
// DefragmentWait at most for its end. A defragmentation that outlasts the
// wait is told from one that never reached the member before the step
// counts as taken: while etcd defragments, its Status does not answer;
// once done, its file has another size.
func defragment(ctx context.Context, cn *conn) error {
	mc := pb.NewMaintenanceClient(cn.cc)
	before, err := quickStatus(ctx, mc)
	if err != nil {
		return wrap("defragment: status before", err)
	}
	waiting, cancel := bounded(ctx, defragmentWait)
	_, err = mc.Defragment(waiting, &pb.DefragmentRequest{})
	outlasted := timedOut(waiting, err) && ctx.Err() == nil
	cancel()
	if !outlasted {
		return wrap("defragment", err)
	}
	after, err := quickStatus(ctx, mc)
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil // running: etcd carries on without the caller
	case err != nil:
		return wrap("defragment: status after", err)
	case after.DbSize != before.DbSize:
		return nil // done meanwhile
	}
	return fmt.Errorf("defragment: the member shows no sign of it after %v", defragmentWait)
}

// statusProbe bounds a Status read that tells whether a defragmentation
// runs: a member that is not busy answers in milliseconds.
const statusProbe = 300 * time.Millisecond

func quickStatus(ctx context.Context, mc pb.MaintenanceClient) (*pb.StatusResponse, error) {
	probe, cancel := bounded(ctx, statusProbe)
	defer cancel()
	resp, err := mc.Status(probe, &pb.StatusRequest{})
	if timedOut(probe, err) {
		return nil, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return resp, err
}

// timedOut: the call ran out of its time. The server, which is sent the
// deadline, may end the stream a moment before the caller's own timer.
func timedOut(ctx context.Context, err error) bool {
	return err != nil && (ctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded)
}

// disarmNoSpace disarms every NOSPACE alarm, whichever member raised it,
// and no other alarm: a CORRUPT alarm is left to a person.
func disarmNoSpace(ctx context.Context, cn *conn) error {
	mc := pb.NewMaintenanceClient(cn.cc)
	resp, err := mc.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	if err != nil {
		return wrap("alarm list", err)
	}
	for _, am := range resp.Alarms {
		if am.Alarm != pb.AlarmType_NOSPACE {
			continue
		}
		_, err := mc.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: am.MemberID, Alarm: pb.AlarmType_NOSPACE})
		if err != nil {
			return wrap(fmt.Sprintf("disarm NOSPACE of member %x", am.MemberID), err)
		}
	}
	return nil
}

// fence raises or lifts the hook's write fence: etcd's CORRUPT alarm
// under membership.FenceMemberID. Both are idempotent in etcd: raising an
// alarm that stands, or lifting one that does not, changes nothing. The
// alarm is a raft entry, so once the member that took the request answers,
// it has applied every write committed before the fence.
func fence(ctx context.Context, cn *conn, action pb.AlarmRequest_AlarmAction) error {
	mc := pb.NewMaintenanceClient(cn.cc)
	_, err := mc.Alarm(ctx, &pb.AlarmRequest{Action: action, MemberID: membership.FenceMemberID, Alarm: pb.AlarmType_CORRUPT})
	if err != nil {
		return wrap(strings.ToLower(action.String())+" the write fence", err)
	}
	return nil
}
