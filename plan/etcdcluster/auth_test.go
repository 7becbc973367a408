package etcdcluster

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/membership"
)

// appAuth is the example: a role with readwrite on /app/, and a
// user holding it.
func appAuth() *v1beta2.AuthSpec {
	return &v1beta2.AuthSpec{
		Enabled: true,
		Roles:   []v1beta2.AuthRole{{Name: "app-rw", Permissions: []v1beta2.AuthPermission{{Key: "/app/", Prefix: true, Type: "readwrite"}}}},
		Users:   []v1beta2.AuthUser{{Name: "app", Roles: []string{"app-rw"}}},
	}
}

var appPerm = membership.Permission{Key: "/app/", RangeEnd: "/app0", Type: membership.PermReadWrite}

// authState builds etcd's side: users with their roles, roles with their
// permissions.
func authState(enabled bool, users map[string][]string, roles map[string][]membership.Permission) *membership.AuthState {
	if users == nil {
		users = map[string][]string{}
	}
	if roles == nil {
		roles = map[string][]membership.Permission{}
	}
	return &membership.AuthState{Enabled: enabled, Users: users, Roles: roles}
}

func rootOnly(enabled bool) *membership.AuthState {
	return authState(enabled, map[string][]string{"root": {"root"}}, nil)
}

func TestAuthSteps(t *testing.T) {
	steady := func() *membership.AuthState {
		return authState(true, map[string][]string{"root": {"root"}, "app": {"app-rw"}}, map[string][]membership.Permission{"app-rw": {appPerm}})
	}
	tests := []struct {
		name, reason string
		spec         func() *v1beta2.AuthSpec
		status       *v1beta2.AuthStatus
		state        *membership.AuthState
		want         string // the action's String(), "" for none
	}{
		{"fresh", "root comes first: the hook's own access", appAuth, nil, authState(false, nil, nil), "add user root (client certificate)"},
		{"root without its role", "", appAuth, nil, authState(false, map[string][]string{"root": nil}, nil), "grant role root to user root"},
		{"root ready", "then authentication goes on, before anything else", appAuth, nil, rootOnly(false), "enable etcd authentication"},
		{"role missing", "", appAuth, nil, rootOnly(true), "add role app-rw"},
		{"permission missing", "a prefix is stored as its range",
			appAuth, nil, authState(true, map[string][]string{"root": {"root"}}, map[string][]membership.Permission{"app-rw": nil}),
			`grant role app-rw readwrite on ["/app/", "/app0")`},
		{"permission of another type", "granting again updates the type in place",
			appAuth, nil, authState(true, map[string][]string{"root": {"root"}}, map[string][]membership.Permission{"app-rw": {{Key: "/app/", RangeEnd: "/app0", Type: membership.PermRead}}}),
			`grant role app-rw readwrite on ["/app/", "/app0")`},
		{"permission not declared", "a declared role holds exactly its declared permissions",
			appAuth, nil, authState(true, map[string][]string{"root": {"root"}}, map[string][]membership.Permission{"app-rw": {appPerm, {Key: "/secret", Type: membership.PermRead}}}),
			`revoke from role app-rw read on "/secret"`},
		{"user missing", "a certificate user (spec.TLS.auto) has no password",
			appAuth, nil, authState(true, map[string][]string{"root": {"root"}}, map[string][]membership.Permission{"app-rw": {appPerm}}),
			"add user app (client certificate)"},
		{"role not granted", "", appAuth, nil, authState(true, map[string][]string{"root": {"root"}, "app": nil}, map[string][]membership.Permission{"app-rw": {appPerm}}),
			"grant role app-rw to user app"},
		{"role not declared for the user", "", appAuth, nil,
			authState(true, map[string][]string{"root": {"root"}, "app": {"app-rw", "ops"}}, map[string][]membership.Permission{"app-rw": {appPerm}, "ops": nil}),
			"revoke role ops from user app"},
		{"steady", "nothing to do", appAuth, nil, steady(), ""},
		{"a user made by hand", "left alone without prune", appAuth, &v1beta2.AuthStatus{Users: []string{"app"}, Roles: []string{"app-rw"}},
			func() *membership.AuthState { s := steady(); s.Users["alice"] = nil; return s }(), ""},
		{"a user made by hand, with prune", "prune deletes what nobody declared", func() *v1beta2.AuthSpec { a := appAuth(); a.Prune = true; return a }, nil,
			func() *membership.AuthState { s := steady(); s.Users["alice"] = nil; return s }(), "delete user alice"},
		{"a user dropped from the spec", "the hook made it: it goes, even without prune",
			func() *v1beta2.AuthSpec { a := appAuth(); a.Users = nil; return a }, &v1beta2.AuthStatus{Enabled: true, Users: []string{"app"}, Roles: []string{"app-rw"}},
			steady(), "delete user app"},
		{"a role dropped from the spec", "",
			func() *v1beta2.AuthSpec { a := appAuth(); a.Users, a.Roles = nil, nil; return a }, &v1beta2.AuthStatus{Enabled: true, Roles: []string{"app-rw"}},
			authState(true, map[string][]string{"root": {"root"}}, map[string][]membership.Permission{"app-rw": {appPerm}}), "delete role app-rw"},
		{"prune never takes root", "root's user and role stay, whatever prune says",
			func() *v1beta2.AuthSpec { return &v1beta2.AuthSpec{Enabled: true, Prune: true} }, nil,
			authState(true, map[string][]string{"root": {"root"}}, map[string][]membership.Permission{"root": nil}), ""},
		{"auth turned off", "authentication goes off; users and roles stay",
			func() *v1beta2.AuthSpec { a := appAuth(); a.Enabled = false; return a }, &v1beta2.AuthStatus{Enabled: true, Users: []string{"app"}, Roles: []string{"app-rw"}},
			steady(), "disable etcd authentication"},
		{"spec.auth removed", "the same as off", func() *v1beta2.AuthSpec { return nil }, &v1beta2.AuthStatus{Enabled: true},
			steady(), "disable etcd authentication"},
		{"off and off", "nothing to do", func() *v1beta2.AuthSpec { return nil }, &v1beta2.AuthStatus{}, rootOnly(false), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := runningAuto(t, 3)
			o.Cluster.Spec.Auth = tt.spec()
			o.Cluster.Status.Auth = tt.status
			o.Auth = tt.state
			d := Plan(o)
			got := ""
			if d.Action != nil {
				got = d.Action.String()
				if d.Action.RemovesRootAccess() {
					t.Fatalf("%s: %s takes root's access away", tt.reason, got)
				}
			}
			if got != tt.want {
				t.Errorf("%s: action %q, want %q (status %+v)", tt.reason, got, tt.want, d.Status.Conditions)
			}
		})
	}
}

// TestAuthStatusRecordsWhatTheHookLooksAfter: status.auth lists the
// declared users and roles, and one dropped from the spec until it is
// deleted from etcd, so that a later sync still knows to delete it.
func TestAuthStatusRecordsWhatTheHookLooksAfter(t *testing.T) {
	o := runningAuto(t, 3)
	o.Cluster.Spec.Auth = &v1beta2.AuthSpec{Enabled: true}
	o.Cluster.Status.Auth = &v1beta2.AuthStatus{Enabled: true, Users: []string{"app"}, Roles: []string{"app-rw"}}
	o.Auth = authState(true, map[string][]string{"root": {"root"}, "app": {"app-rw"}}, map[string][]membership.Permission{"app-rw": {appPerm}})
	d := Plan(o)
	want := &v1beta2.AuthStatus{Enabled: true, Users: []string{"app"}, Roles: []string{"app-rw"}, Pending: "delete user app"}
	if diff := cmp.Diff(want, d.Status.Auth); diff != "" {
		t.Errorf("status.auth while the dropped user is deleted (-want +got):\n%s", diff)
	}
	o.Auth = authState(true, map[string][]string{"root": {"root"}}, nil)
	if d := Plan(o); d.Status.Auth == nil || len(d.Status.Auth.Users)+len(d.Status.Auth.Roles) != 0 {
		t.Errorf("status.auth once both are gone: %+v, want nothing looked after", d.Status.Auth)
	}
}

func TestAuthUserCredentials(t *testing.T) {
	t.Run("certificate", func(t *testing.T) {
		o := runningAuto(t, 3)
		o.Cluster.Spec.Auth = appAuth()
		o.Auth = rootOnly(true)
		got := secretsIn(t, Plan(o))["demo-user-app"]
		if got == nil {
			t.Fatal("no Secret demo-user-app for user app")
		}
		cert := certOf(t, got.Data[UserCertKey])
		if cert.Subject.CommonName != "app" || len(got.Data[UserKeyKey]) == 0 || len(got.Data[UserCAKey]) == 0 {
			t.Errorf("user app's certificate: CN %q, key %d bytes, CA %d bytes; want CN app and both", cert.Subject.CommonName, len(got.Data[UserKeyKey]), len(got.Data[UserCAKey]))
		}
	})
	t.Run("password", func(t *testing.T) {
		c := tlsCluster(3)
		c.Spec.Auth = appAuth()
		o := withSecrets(observed(c), issued(t))
		first := secretsIn(t, Plan(o))["demo-user-app"]
		if first == nil || len(first.Data[UserPasswordKey]) < 32 {
			t.Fatalf("user app's Secret with static TLS: %+v, want a password", first)
		}
		applySecrets(t, o, Plan(o))
		kept := secretsIn(t, Plan(o))["demo-user-app"]
		if string(kept.Data[UserPasswordKey]) != string(o.SecretChildren["demo-user-app"].Data[UserPasswordKey]) {
			t.Error("the stored password was replaced: it must stay as long as the Secret does")
		}
	})
}

// TestAuthRefusedWithoutRootCertificate: with static TLS, an operator
// certificate whose CN is not root would lock the hook out once
// authentication is on: nothing is changed, and the condition says why.
func TestAuthRefusedWithoutRootCertificate(t *testing.T) {
	c := tlsCluster(3)
	c.Status.Phase = v1beta2.PhaseRunning
	c.Spec.Auth = appAuth()
	o := withSecrets(observed(c), issued(t)) // CN etcd-hook
	o.Membership = memberList(1)
	for i := range 3 {
		pod := onSpec(readyPod(name(i)), c.Spec)
		addTLS(pod, c.TLSSecrets())
		o.Pods[name(i)] = pod
		o.Membership.Members = append(o.Membership.Members, member(uint64(i+1), name(i)))
	}
	o.Auth = authState(false, nil, nil)
	d := Plan(o)
	if d.Action != nil {
		t.Errorf("an authentication step was taken with a non-root operator certificate: %s", d.Action)
	}
	if got := conditionOf(d.Status, v1beta2.ConditionDegraded); got.Reason != ReasonAuthRefused {
		t.Errorf("Degraded = %+v, want %s", got, ReasonAuthRefused)
	}
}

// FuzzAuthStep: whatever etcd holds, whatever the spec declares and
// whatever status.auth claims the hook made (root included), the step the
// planner takes never removes root or its role, never turns
// authentication on before root holds its role, and never deletes a user
// or role the spec declares.
func FuzzAuthStep(f *testing.F) {
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(0xffffffffffffffff), uint64(0x5555555555555555))
	f.Add(uint64(0x0123456789abcdef), uint64(0xfedcba9876543210))
	names := []string{"root", "app", "alice", "ops"}
	roles := []string{"root", "app-rw", "ops"}
	perms := []membership.Permission{appPerm, {Key: "/secret", Type: membership.PermRead}, {Key: "/", RangeEnd: "\x00", Type: membership.PermWrite}}
	o := runningAuto(f, 3)
	f.Fuzz(func(t *testing.T, etcdBits, specBits uint64) {
		bit := func(bits *uint64) bool { b := *bits&1 == 1; *bits >>= 1; return b }
		st := authState(bit(&etcdBits), nil, nil)
		for _, u := range names {
			if bit(&etcdBits) {
				var held []string
				for _, r := range roles {
					if bit(&etcdBits) {
						held = append(held, r)
					}
				}
				st.Users[u] = held
			}
		}
		for _, r := range roles {
			if bit(&etcdBits) {
				var ps []membership.Permission
				for _, p := range perms {
					if bit(&etcdBits) {
						ps = append(ps, p)
					}
				}
				st.Roles[r] = ps
			}
		}
		var spec *v1beta2.AuthSpec
		if bit(&specBits) {
			spec = &v1beta2.AuthSpec{Enabled: bit(&specBits), Prune: bit(&specBits)}
			for _, r := range roles[1:] {
				if bit(&specBits) {
					role := v1beta2.AuthRole{Name: r}
					if bit(&specBits) {
						role.Permissions = []v1beta2.AuthPermission{{Key: "/app/", Prefix: true, Type: "readwrite"}}
					}
					spec.Roles = append(spec.Roles, role)
				}
			}
			for _, u := range names[1:] {
				if bit(&specBits) {
					user := v1beta2.AuthUser{Name: u}
					for _, r := range spec.Roles {
						if bit(&specBits) {
							user.Roles = append(user.Roles, r.Name)
						}
					}
					spec.Users = append(spec.Users, user)
				}
			}
		}
		var status *v1beta2.AuthStatus
		if bit(&specBits) {
			status = &v1beta2.AuthStatus{Enabled: true, Users: []string{"root", "alice"}, Roles: []string{"root", "ops"}}
		}
		obs := *o
		c := *o.Cluster
		c.Spec.Auth, c.Status.Auth = spec, status
		obs.Cluster, obs.Auth = &c, st
		d := Plan(&obs)
		a := d.Action
		if a == nil {
			return
		}
		switch {
		case a.RemovesRootAccess():
			t.Fatalf("%s takes root's access away (etcd %+v, spec %+v, status %+v)", a, st, spec, status)
		case a.Type == membership.ActionAuthEnable && !st.RootReady():
			t.Fatalf("authentication turned on before root holds its role (etcd %+v)", st)
		case a.Type == membership.ActionUserDelete && spec != nil && slices.ContainsFunc(spec.Users, func(u v1beta2.AuthUser) bool { return u.Name == a.User }):
			t.Fatalf("declared user %s deleted", a.User)
		case a.Type == membership.ActionRoleDelete && spec != nil && slices.ContainsFunc(spec.Roles, func(r v1beta2.AuthRole) bool { return r.Name == a.Role }):
			t.Fatalf("declared role %s deleted", a.Role)
		}
	})
}
