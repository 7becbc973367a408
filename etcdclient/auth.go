package etcdclient

import (
	"context"
	"errors"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/etcdhook/etcd-hook/membership"
)

// Auth reads etcd's authentication through the first member that
// answers: whether it is on, and every user and role. A sync asks for
// its auth revision alone when nothing changed since the last read of the
// same cluster (authReads), so a steady sync costs one call.
func (c *cluster) Auth(ctx context.Context) (*membership.AuthState, error) {
	ctx, cancel := bounded(ctx, CallTimeout)
	defer cancel()
	var last error
	for _, ep := range c.endpoints {
		var state *membership.AuthState
		err := c.member(ctx, ep, func(ctx context.Context, cn *conn) error {
			var err error
			state, err = readAuth(ctx, pb.NewAuthClient(cn.cc))
			return err
		})
		if err == nil {
			return state, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// authReads remembers the last full read of each cluster, by its cluster
// ID and auth revision: etcd moves the revision with every change of
// users, roles, permissions, and of auth being on or off.
var authReads = struct {
	mu sync.Mutex
	m  map[authReadKey]*membership.AuthState
}{m: map[authReadKey]*membership.AuthState{}}

type authReadKey struct {
	cluster  uint64
	revision uint64
}

// maxAuthReads bounds authReads: one entry per cluster, whose new
// revision replaces the old.
const maxAuthReads = 1 << 14

func readAuth(ctx context.Context, ac pb.AuthClient) (*membership.AuthState, error) {
	st, err := ac.AuthStatus(ctx, &pb.AuthStatusRequest{})
	if err != nil {
		return nil, wrap("auth status", err)
	}
	key := authReadKey{st.Header.GetClusterId(), st.AuthRevision}
	authReads.mu.Lock()
	cached, ok := authReads.m[key]
	authReads.mu.Unlock()
	if ok && cached.Enabled == st.Enabled {
		return cached, nil
	}
	state := &membership.AuthState{Enabled: st.Enabled, Revision: st.AuthRevision, Users: map[string][]string{}, Roles: map[string][]membership.Permission{}}
	users, err := ac.UserList(ctx, &pb.AuthUserListRequest{})
	if err != nil {
		return nil, wrap("user list", err)
	}
	for _, u := range users.Users {
		resp, err := ac.UserGet(ctx, &pb.AuthUserGetRequest{Name: u})
		if err != nil {
			return nil, wrap("user get "+u, err)
		}
		roles := slices.Clone(resp.Roles)
		slices.Sort(roles)
		state.Users[u] = roles
	}
	roles, err := ac.RoleList(ctx, &pb.AuthRoleListRequest{})
	if err != nil {
		return nil, wrap("role list", err)
	}
	for _, r := range roles.Roles {
		resp, err := ac.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: r})
		if err != nil {
			return nil, wrap("role get "+r, err)
		}
		perms := make([]membership.Permission, 0, len(resp.Perm))
		for _, p := range resp.Perm {
			perms = append(perms, membership.Permission{Key: string(p.Key), RangeEnd: string(p.RangeEnd), Type: permissionType(p.PermType)})
		}
		state.Roles[r] = perms
	}
	authReads.mu.Lock()
	for k := range authReads.m {
		if k.cluster == key.cluster || len(authReads.m) >= maxAuthReads {
			delete(authReads.m, k)
		}
	}
	authReads.m[key] = state
	authReads.mu.Unlock()
	return state, nil
}

func permissionType(t authpb.Permission_Type) membership.PermissionType {
	switch t {
	case authpb.READ:
		return membership.PermRead
	case authpb.WRITE:
		return membership.PermWrite
	}
	return membership.PermReadWrite
}

func permType(t membership.PermissionType) authpb.Permission_Type {
	switch t {
	case membership.PermRead:
		return authpb.READ
	case membership.PermWrite:
		return authpb.WRITE
	}
	return authpb.READWRITE
}

// changeAuth makes one authentication step through cn. Each is idempotent
// against what etcd holds: a user or role that exists already, or is
// gone already, is what was asked.
func changeAuth(ctx context.Context, cn *conn, a membership.Action) error {
	if a.RemovesRootAccess() {
		// The planner never asks; a bug must not lock the hook out.
		return errors.New("refused: " + a.String() + " would take away the hook's own access")
	}
	ac := pb.NewAuthClient(cn.cc)
	var err error
	switch a.Type {
	case membership.ActionAuthEnable:
		_, err = ac.AuthEnable(ctx, &pb.AuthEnableRequest{})
	case membership.ActionAuthDisable:
		_, err = ac.AuthDisable(ctx, &pb.AuthDisableRequest{})
	case membership.ActionUserAdd:
		req := &pb.AuthUserAddRequest{Name: a.User, Password: a.Password, Options: &authpb.UserAddOptions{NoPassword: a.Password == ""}}
		_, err = ac.UserAdd(ctx, req)
		if isEtcdError(err, rpctypes.ErrUserAlreadyExist) {
			err = nil
		}
	case membership.ActionUserDelete:
		_, err = ac.UserDelete(ctx, &pb.AuthUserDeleteRequest{Name: a.User})
		if isEtcdError(err, rpctypes.ErrUserNotFound) {
			err = nil
		}
	case membership.ActionUserGrantRole:
		_, err = ac.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: a.User, Role: a.Role})
	case membership.ActionUserRevokeRole:
		_, err = ac.UserRevokeRole(ctx, &pb.AuthUserRevokeRoleRequest{Name: a.User, Role: a.Role})
		if isEtcdError(err, rpctypes.ErrRoleNotGranted) {
			err = nil
		}
	case membership.ActionRoleAdd:
		_, err = ac.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: a.Role})
		if isEtcdError(err, rpctypes.ErrRoleAlreadyExist) {
			err = nil
		}
	case membership.ActionRoleDelete:
		_, err = ac.RoleDelete(ctx, &pb.AuthRoleDeleteRequest{Role: a.Role})
		if isEtcdError(err, rpctypes.ErrRoleNotFound) {
			err = nil
		}
	case membership.ActionRoleGrantPermission:
		p := a.Permission
		_, err = ac.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: a.Role, Perm: &authpb.Permission{
			PermType: permType(p.Type), Key: []byte(p.Key), RangeEnd: []byte(p.RangeEnd),
		}})
	case membership.ActionRoleRevokePermission:
		p := a.Permission
		_, err = ac.RoleRevokePermission(ctx, &pb.AuthRoleRevokePermissionRequest{Role: a.Role, Key: []byte(p.Key), RangeEnd: []byte(p.RangeEnd)})
		if isEtcdError(err, rpctypes.ErrPermissionNotGranted) {
			err = nil
		}
	default:
		return errors.New("unknown authentication step " + string(a.Type))
	}
	return wrap(a.String(), err)
}
