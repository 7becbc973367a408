package etcdclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/internal/tlstest"
	"github.com/etcdhook/etcd-hook/membership"
)

// TestAuthSteps: on a real member serving TLS with client certificates,
// the hook, calling as root (its certificate's CN), creates root, enables
// authentication, declares a role and a user, and reads back exactly what
// it made; every step made twice changes nothing the second time; and a
// user certificate then reaches its keys and no others.
func TestAuthSteps(t *testing.T) {
	ec, ca := startTLSCluster(t, versions[len(versions)-1], 1)
	root, err := ca.Issue(tlstest.LeafOptions{CommonName: membership.RootUser, Usage: tlstest.Client})
	if err != nil {
		t.Fatal(err)
	}
	pool := etcdclient.NewPool(0)
	t.Cleanup(pool.Close)
	c, err := pool.Cluster(ec.Endpoints(), &etcdclient.ClientTLS{ID: "root", Cert: root.CertPEM, Key: root.KeyPEM, CA: ca.PEM})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ms, err := c.Membership(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := ec.Endpoints()[0]
	perm := &membership.Permission{Key: "/app/", RangeEnd: membership.PrefixEnd("/app/"), Type: membership.PermReadWrite}
	steps := []membership.Action{
		{Type: membership.ActionUserAdd, User: membership.RootUser},
		{Type: membership.ActionUserGrantRole, User: membership.RootUser, Role: membership.RootRole},
		{Type: membership.ActionAuthEnable},
		{Type: membership.ActionRoleAdd, Role: "app-rw"},
		{Type: membership.ActionRoleGrantPermission, Role: "app-rw", Permission: perm},
		{Type: membership.ActionUserAdd, User: "app"},
		{Type: membership.ActionUserGrantRole, User: "app", Role: "app-rw"},
	}
	for _, a := range steps {
		a.LeaderEndpoint, a.LeaderID = leader, ms.LeaderID
		for try := range 2 {
			if _, err := c.Apply(ctx, a); err != nil {
				t.Fatalf("%s (attempt %d): %v", a, try+1, err)
			}
		}
	}
	got, err := c.Auth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := &membership.AuthState{
		Enabled: true, Revision: got.Revision,
		Users: map[string][]string{"root": {"root"}, "app": {"app-rw"}},
		Roles: map[string][]membership.Permission{"app-rw": {*perm}}, // etcd lists no root role: it is built in
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Auth() after the steps (-want +got):\n%s", diff)
	}
	if again, err := c.Auth(ctx); err != nil || again != got {
		t.Errorf("a second read at the same auth revision read everything again (%v)", err)
	}

	// The user's certificate: its prefix, and nothing else.
	pair, err := ca.ClientPair("app")
	if err != nil {
		t.Fatal(err)
	}
	cfg := ca.ClientConfig(pair)
	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), TLS: cfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(key string) error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := cli.Put(ctx, key, "x")
		return err
	}
	if err := put("/app/a"); err != nil {
		t.Errorf("user app cannot write under /app/: %v", err)
	}
	if err := put("/other"); err == nil {
		t.Error("user app wrote outside /app/")
	}

	// Root's access is never taken, even if asked.
	for _, a := range []membership.Action{
		{Type: membership.ActionUserDelete, User: membership.RootUser},
		{Type: membership.ActionUserRevokeRole, User: membership.RootUser, Role: membership.RootRole},
		{Type: membership.ActionRoleDelete, Role: membership.RootRole},
	} {
		a.LeaderEndpoint = leader
		if _, err := c.Apply(ctx, a); err == nil {
			t.Errorf("%s went through", a)
		}
	}
	if st, err := c.Auth(ctx); err != nil || !st.RootReady() {
		t.Errorf("root after the refused steps: %+v, %v", st, err)
	}
}
