package etcdcluster

import (
	"fmt"
	"slices"
	"sort"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
)

// spec.auth: etcd's authentication, declared. The hook reads etcd's users
// and roles in each sync (Observed.Auth) and makes at most one change
// toward the spec, as with membership, once the cluster matches its spec
// otherwise. The order keeps the hook's own access first:
//  1. root exists and holds the root role (the hook calls as root, its
//     client certificate's CN);
//  2. authentication is on;
//  3. the declared roles, then their permissions, exactly;
//  4. the declared users (once their credentials are stored), then their
//     roles, exactly;
//  5. what the hook made and the spec no longer names is deleted
//     (status.auth lists it), and with prune what nobody declared.
//
// Root, and its role, are never removed (membership.Action's
// RemovesRootAccess; etcdclient refuses such a step too). With spec.auth
// off, authentication is turned off and users and roles stay.

// Reasons of authentication steps.
const (
	ReasonReconcilingAuth = "ReconcilingAuth"
	ReasonAuthRefused     = "AuthRefused"
)

// authStep is the next change of etcd's authentication, if any.
func (p *planner) authStep(leader memberView) (stepResult, bool) {
	st, a := p.o.Auth, p.spec.Auth
	if st == nil {
		return stepResult{}, false
	}
	act := func(action membership.Action, why string) (stepResult, bool) {
		action.Reason = why
		return acting(action, ReasonReconcilingAuth), true
	}
	if a == nil || !a.Enabled {
		if st.Enabled {
			return act(membership.Action{Type: membership.ActionAuthDisable}, "spec.auth does not enable authentication: it is turned off (users and roles stay)")
		}
		return stepResult{}, false
	}
	if msg := p.authRefused(); msg != "" {
		return blockedStep(ReasonAuthRefused, msg), true
	}
	if !st.HasUser(membership.RootUser) {
		return act(membership.Action{Type: membership.ActionUserAdd, User: membership.RootUser}, "the hook's own user, root, authenticated by its client certificate")
	}
	if !st.UserHasRole(membership.RootUser, membership.RootRole) {
		return act(membership.Action{Type: membership.ActionUserGrantRole, User: membership.RootUser, Role: membership.RootRole}, "root holds the root role")
	}
	if !st.Enabled {
		return act(membership.Action{Type: membership.ActionAuthEnable}, "spec.auth.enabled: root is ready, authentication goes on")
	}
	for _, r := range a.Roles {
		have, exists := st.Roles[r.Name]
		if !exists {
			return act(membership.Action{Type: membership.ActionRoleAdd, Role: r.Name}, "role "+r.Name+" is declared in spec.auth.roles")
		}
		want := wantedPermissions(r)
		for _, w := range want {
			if !slices.Contains(have, w) {
				perm := w
				return act(membership.Action{Type: membership.ActionRoleGrantPermission, Role: r.Name, Permission: &perm}, "role "+r.Name+" is declared with "+w.String())
			}
		}
		for _, h := range have {
			if !slices.ContainsFunc(want, func(w membership.Permission) bool { return w.Key == h.Key && w.RangeEnd == h.RangeEnd }) {
				perm := h
				return act(membership.Action{Type: membership.ActionRoleRevokePermission, Role: r.Name, Permission: &perm}, "role "+r.Name+" is not declared with "+h.String())
			}
		}
	}
	for _, u := range a.Users {
		roles, exists := st.Users[u.Name]
		if !exists {
			password, ready := p.userPassword(u.Name)
			if !ready {
				return waiting(ReasonReconcilingAuth, fmt.Sprintf("waiting for the credentials of user %s to be stored before it is made", u.Name)), true
			}
			return act(membership.Action{Type: membership.ActionUserAdd, User: u.Name, Password: password}, "user "+u.Name+" is declared in spec.auth.users")
		}
		for _, r := range u.Roles {
			if !slices.Contains(roles, r) {
				return act(membership.Action{Type: membership.ActionUserGrantRole, User: u.Name, Role: r}, fmt.Sprintf("user %s is declared with role %s", u.Name, r))
			}
		}
		for _, r := range roles {
			if !slices.Contains(u.Roles, r) {
				return act(membership.Action{Type: membership.ActionUserRevokeRole, User: u.Name, Role: r}, fmt.Sprintf("user %s is not declared with role %s", u.Name, r))
			}
		}
	}
	for _, u := range sorted(keysOf(st.Users)) {
		if u == membership.RootUser || slices.ContainsFunc(a.Users, func(d v1beta2.AuthUser) bool { return d.Name == u }) {
			continue
		}
		if p.managedUser(u) || a.Prune {
			return act(membership.Action{Type: membership.ActionUserDelete, User: u}, "user "+u+" is no longer declared in spec.auth.users")
		}
	}
	for _, r := range sorted(keysOf(st.Roles)) {
		if r == membership.RootRole || slices.ContainsFunc(a.Roles, func(d v1beta2.AuthRole) bool { return d.Name == r }) {
			continue
		}
		if p.managedRole(r) || a.Prune {
			return act(membership.Action{Type: membership.ActionRoleDelete, Role: r}, "role "+r+" is no longer declared in spec.auth.roles")
		}
	}
	return stepResult{}, false
}

// wantedPermissions are a role's permissions as etcd stores them: a prefix
// as the range it stands for.
func wantedPermissions(r v1beta2.AuthRole) []membership.Permission {
	out := make([]membership.Permission, 0, len(r.Permissions))
	for _, perm := range r.Permissions {
		end := perm.RangeEnd
		if perm.Prefix {
			end = membership.PrefixEnd(perm.Key)
		}
		out = append(out, membership.Permission{Key: perm.Key, RangeEnd: end, Type: membership.PermissionType(perm.Type)})
	}
	return out
}

func (p *planner) managedUser(name string) bool {
	prev := p.o.Cluster.Status.Auth
	return prev != nil && slices.Contains(prev.Users, name)
}

func (p *planner) managedRole(name string) bool {
	prev := p.o.Cluster.Status.Auth
	return prev != nil && slices.Contains(prev.Roles, name)
}

// authRefused says why no authentication step may be taken: one that
// would lock the hook out.
func (p *planner) authRefused() string {
	names := p.tlsNames()
	if p.spec.TLS.IsAuto() || names.Operator == "" {
		return ""
	}
	s, ok := p.secret(names.Operator)
	if !ok {
		return ""
	}
	cert, err := cachedKeyPair(s, v1beta2.ClientCertKey, "")
	if err != nil {
		return ""
	}
	if cn := cert.Cert.Subject.CommonName; cn != membership.RootUser {
		return fmt.Sprintf("spec.auth: the hook authenticates as root with its client certificate, and the certificate of Secret %q (spec.TLS.static.operatorSecret) has CN %q: "+
			"issue it with CN root; nothing of etcd's authentication is changed until then", names.Operator, cn)
	}
	return ""
}

// authStatus is status.auth: what the hook saw, the users and roles it
// looks after, and the change it makes next.
func (p *planner) authStatus(next *membership.Action) *v1beta2.AuthStatus {
	prev := p.o.Cluster.Status.Auth
	st, a := p.o.Auth, p.spec.Auth
	if st == nil {
		return prev
	}
	if a == nil && !st.Enabled && (prev == nil || len(prev.Users)+len(prev.Roles) == 0) {
		return nil
	}
	out := &v1beta2.AuthStatus{Enabled: st.Enabled}
	// Looked after: the spec's, and those the hook made that etcd still
	// holds (a user the spec dropped, until it is deleted).
	users, roles := map[string]bool{}, map[string]bool{}
	if a != nil {
		for _, u := range a.Users {
			users[u.Name] = true
		}
		for _, r := range a.Roles {
			roles[r.Name] = true
		}
	}
	if prev != nil {
		for _, u := range prev.Users {
			users[u] = users[u] || st.HasUser(u)
		}
		for _, r := range prev.Roles {
			_, ok := st.Roles[r]
			roles[r] = roles[r] || ok
		}
	}
	out.Users, out.Roles = trueKeys(users), trueKeys(roles)
	if next != nil && next.Type.Auth() {
		out.Pending = next.String()
	}
	return out
}

func trueKeys(m map[string]bool) []string {
	var out []string
	for k, ok := range m {
		if ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// UserSecretName is the Secret with a user's credentials.
func UserSecretName(cluster, user string) string { return cluster + "-user-" + user }

// userPassword is the password a new user is made with: none for a
// certificate user (spec.TLS.auto), else the one its Secret holds, once
// that is stored.
func (p *planner) userPassword(user string) (string, bool) {
	if p.spec.TLS.IsAuto() {
		return "", true
	}
	s, ok := p.o.SecretChildren[UserSecretName(p.o.Cluster.Name, user)]
	if !ok {
		return "", false
	}
	pw := plan.SecretValue(s, UserPasswordKey)
	return string(pw), len(pw) > 0
}
