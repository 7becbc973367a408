package membership

import (
	"fmt"
	"slices"
)

// etcd's authentication as the hook reads and changes it: whether it is
// on, its users and their roles, its roles and their permissions.

// RootUser and RootRole are etcd's: the role that may do anything, and
// the user the hook acts as (its client certificate's CN). Neither is
// ever removed.
const (
	RootUser = "root"
	RootRole = "root"
)

// PermissionType is what a permission allows on its keys.
type PermissionType string

const (
	PermRead      PermissionType = "read"
	PermWrite     PermissionType = "write"
	PermReadWrite PermissionType = "readwrite"
)

// Permission is a role's right on a key, or on the keys [Key, RangeEnd).
type Permission struct {
	Key      string
	RangeEnd string
	Type     PermissionType
}

func (p Permission) String() string {
	if p.RangeEnd == "" {
		return fmt.Sprintf("%s on %q", p.Type, p.Key)
	}
	return fmt.Sprintf("%s on [%q, %q)", p.Type, p.Key, p.RangeEnd)
}

// PrefixEnd is the end of the range of every key starting with prefix,
// as etcd's clientv3.GetPrefixRangeEnd works it out: the prefix with its
// last byte below 0xff incremented, or "\x00" (every key) when there is
// none.
func PrefixEnd(prefix string) string {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return string(end[:i+1])
		}
	}
	return "\x00"
}

// AuthState is etcd's authentication as read in one sync.
type AuthState struct {
	Enabled bool
	// Revision is etcd's auth revision, which every change of users,
	// roles or permissions moves.
	Revision uint64
	// Users are the users by name, each with its roles, sorted.
	Users map[string][]string
	// Roles are the roles by name, each with its permissions.
	Roles map[string][]Permission
}

// HasUser reports whether the user exists.
func (s *AuthState) HasUser(name string) bool {
	_, ok := s.Users[name]
	return ok
}

// UserHasRole reports whether the user exists and holds the role.
func (s *AuthState) UserHasRole(user, role string) bool {
	return slices.Contains(s.Users[user], role)
}

// RootReady: root exists with the root role, so that enabling auth, or
// keeping it on, leaves the hook its access.
func (s *AuthState) RootReady() bool { return s.UserHasRole(RootUser, RootRole) }

// Authentication steps (see auth.go of plan/etcdcluster). Like the
// housekeeping ones, they leave the membership as it is.
const (
	ActionAuthEnable           ActionType = "auth-enable"
	ActionAuthDisable          ActionType = "auth-disable"
	ActionUserAdd              ActionType = "user-add"
	ActionUserDelete           ActionType = "user-delete"
	ActionUserGrantRole        ActionType = "user-grant-role"
	ActionUserRevokeRole       ActionType = "user-revoke-role"
	ActionRoleAdd              ActionType = "role-add"
	ActionRoleDelete           ActionType = "role-delete"
	ActionRoleGrantPermission  ActionType = "role-grant-permission"
	ActionRoleRevokePermission ActionType = "role-revoke-permission"
)

// Auth reports whether the action changes etcd's authentication.
func (t ActionType) Auth() bool {
	switch t {
	case ActionAuthEnable, ActionAuthDisable, ActionUserAdd, ActionUserDelete, ActionUserGrantRole, ActionUserRevokeRole,
		ActionRoleAdd, ActionRoleDelete, ActionRoleGrantPermission, ActionRoleRevokePermission:
		return true
	}
	return false
}

// RemovesRootAccess reports whether the action would take root, or its
// role, away: what the hook never does, whatever the spec says.
func (a Action) RemovesRootAccess() bool {
	switch a.Type {
	case ActionUserDelete:
		return a.User == RootUser
	case ActionUserRevokeRole:
		return a.User == RootUser && a.Role == RootRole
	case ActionRoleDelete, ActionRoleRevokePermission:
		return a.Role == RootRole
	}
	return false
}

func (a Action) authString() string {
	switch a.Type {
	case ActionAuthEnable:
		return "enable etcd authentication"
	case ActionAuthDisable:
		return "disable etcd authentication"
	case ActionUserAdd:
		if a.Password == "" {
			return fmt.Sprintf("add user %s (client certificate)", a.User)
		}
		return fmt.Sprintf("add user %s (password)", a.User)
	case ActionUserDelete:
		return "delete user " + a.User
	case ActionUserGrantRole:
		return fmt.Sprintf("grant role %s to user %s", a.Role, a.User)
	case ActionUserRevokeRole:
		return fmt.Sprintf("revoke role %s from user %s", a.Role, a.User)
	case ActionRoleAdd:
		return "add role " + a.Role
	case ActionRoleDelete:
		return "delete role " + a.Role
	case ActionRoleGrantPermission:
		return fmt.Sprintf("grant role %s %s", a.Role, a.Permission)
	case ActionRoleRevokePermission:
		return fmt.Sprintf("revoke from role %s %s", a.Role, a.Permission)
	}
	return string(a.Type)
}
