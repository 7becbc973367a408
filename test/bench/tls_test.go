package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/etcdtest"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// The TLS requests the reports send are what the hook gets from
// Metacontroller for a running cluster with spec.TLS: the Secrets
// related, Pods that advertise https URLs and mount the member Secrets,
// and a plan on them that keeps the cluster as it is. The reports run
// only when asked; this checks their requests on every test run.
func TestTLSRequestIsSteady(t *testing.T) {
	fleet, err := newFleet(2, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	fc := fleet[1]
	if fleet[0].tls != nil || fc.tls == nil {
		t.Fatalf("newFleet(2, nil, 2): want the second cluster with spec.TLS only")
	}
	status := v1beta2.ClusterStatus{Phase: v1beta2.PhaseRunning, Size: len(fc.members)}
	status.Members.Ready = fc.members
	req, err := fc.request(status)
	if err != nil {
		t.Fatal(err)
	}
	o, err := hooks.Decode(req)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.SpecErrors) > 0 {
		t.Fatalf("spec errors: %v", o.SpecErrors)
	}
	for _, name := range []string{o.Cluster.Spec.TLS.PeerSecret(), o.Cluster.Spec.TLS.ServerSecret(), o.Cluster.Spec.TLS.OperatorSecret()} {
		if s := o.Secrets[name]; s == nil || s.UID == "" || s.ResourceVersion == "" {
			t.Errorf("Secret %q not related with a UID and resourceVersion (the hook keys its parsed certificates by them): %v", name, s)
		}
	}
	addr := fc.addresses()
	ms := &membership.Membership{}
	for i, name := range fc.members {
		pod := o.Pods[name]
		if pod == nil {
			t.Fatalf("no Pod %s", name)
		}
		if got, want := etcdcluster.MemberClientURL(o.Cluster, pod), addr.ClientURL(name); got != want || !strings.HasPrefix(got, "https://") {
			t.Errorf("Pod %s advertises %q, want %q", name, got, want)
		}
		var mounts []string
		for _, v := range pod.Spec.Volumes {
			if v.Secret != nil {
				mounts = append(mounts, v.Secret.SecretName)
			}
		}
		if want := []string{o.Cluster.Spec.TLS.PeerSecret(), o.Cluster.Spec.TLS.ServerSecret()}; !slices.Equal(mounts, want) {
			t.Errorf("Pod %s mounts Secrets %v, want %v", name, mounts, want)
		}
		ms.Members = append(ms.Members, membership.Member{
			ID: simID("member/" + name), Name: name, PeerURLs: []string{addr.PeerURL(name)}, ClientURLs: []string{addr.ClientURL(name)},
			Reachable: true, Version: etcdtest.DefaultVersion, RaftIndex: simRaftIndex,
		})
		if i == 0 {
			ms.LeaderID = ms.Members[0].ID
		}
	}
	o.Membership, o.Now = ms, time.Now()
	d := etcdcluster.Plan(o)
	if d.Action != nil {
		t.Errorf("the plan of the steady TLS request acts: %v", d.Action)
	}
	converged := slices.ContainsFunc(d.Status.Conditions, func(c v1beta2.ClusterCondition) bool {
		return c.Type == v1beta2.ConditionProgressing && c.Reason == etcdcluster.ReasonConverged
	})
	if !converged {
		t.Errorf("the plan of the steady TLS request is not Converged: %+v", d.Status.Conditions)
	}
	var pods []string
	for _, c := range d.Children {
		if c.Kind == plan.KindPod {
			pods = append(pods, c.Name)
		}
	}
	if want := slices.Sorted(slices.Values(fc.members)); !slices.Equal(slices.Sorted(slices.Values(pods)), want) {
		t.Errorf("the plan keeps Pods %v, want %v", pods, want)
	}
}
