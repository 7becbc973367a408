package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcdhook/etcd-hook/test/e2e/harness"
)

// coreosCluster leaves an EtcdCluster as the CoreOS etcd-operator v0.9.4
// did, through the harness's renderings of its objects: the parent with
// Metacontroller stopped (it is installed after the CoreOS cluster
// exists), the two Services, a seed Pod, then for each further member an
// etcd MemberAdd of its peer URL followed by its Pod, and the status the
// operator wrote. With tls, every member serves peers and clients TLS
// with the Secrets of spec.TLS.static, as the operator rendered them.
type coreosCluster struct {
	s       *scenario
	parent  harness.Object
	owner   harness.OwnerRef
	tls     *harness.CoreOSTLS
	members []string
	// labelled: the migration began, so a Pod made from now on carries
	// the controller-uid label as the others do.
	labelled bool
}

func newCoreOSCluster(s *scenario, spec map[string]any, tls *harness.CoreOSTLS) *coreosCluster {
	t := s.t
	t.Helper()
	s.env.MC.Stop()
	parent, err := s.env.MC.CreateParent(ns, exampleName, spec)
	if err != nil {
		t.Fatal(err)
	}
	c := &coreosCluster{s: s, parent: parent, owner: harness.CoreOSOwnerRef(parent), tls: tls}
	for _, svc := range harness.CoreOSServices(exampleName, ns, c.owner) {
		if _, err := s.env.API.Create(svc); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *coreosCluster) peerURL(member string) string {
	if c.tls != nil {
		return harness.CoreOSTLSPeerURL(ns, member)
	}
	return harness.CoreOSPeerURL(ns, member)
}

func (c *coreosCluster) clientURL(member string) string {
	if c.tls != nil {
		return harness.CoreOSTLSClientURL(ns, member)
	}
	return harness.CoreOSClientURL(ns, member)
}

// seed starts the first member, as the operator did: state new, with the
// cluster's token.
func (c *coreosCluster) seed() string {
	c.s.t.Helper()
	m := harness.CoreOSMemberName(exampleName)
	c.members = append(c.members, m)
	c.pod(m, "new", "coreos-token")
	return m
}

// pod makes a member's Pod, listing every member added so far in
// --initial-cluster, and waits until it is ready.
func (c *coreosCluster) pod(member, state, token string) {
	t, env := c.s.t, c.s.env
	t.Helper()
	var pairs []string
	for _, m := range c.members {
		pairs = append(pairs, m+"="+c.peerURL(m))
	}
	var pod harness.Object
	if c.tls != nil {
		pod = harness.CoreOSTLSMemberPod(exampleName, ns, member, faultVersion, pairs, state, token, c.owner, "", *c.tls)
	} else {
		pod = harness.CoreOSMemberPod(exampleName, ns, member, faultVersion, pairs, state, token, c.owner, "")
	}
	if c.labelled {
		pod["metadata"].(map[string]any)["labels"].(map[string]any)[harness.LabelControllerUID] = uidOf(c.parent)
	}
	if _, err := env.API.Create(pod); err != nil {
		t.Fatal(err)
	}
	if _, err := env.WaitPodReady(ns, member, 90*time.Second); err != nil {
		t.Fatal(err)
	}
}

// memberAdd adds a member to etcd through the seed, as the operator did
// before making its Pod, and returns its name.
func (c *coreosCluster) memberAdd() string {
	t, env := c.s.t, c.s.env
	t.Helper()
	m := harness.CoreOSMemberName(exampleName)
	cli, err := NewClient(c.clientURL(c.members[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// etcd refuses a member while a peer joined within its health
	// interval ("unhealthy cluster"); the operator retried too.
	err = env.WaitFor(30*time.Second, "MemberAdd "+m, func() (bool, string) {
		ctx, cancel := context.WithTimeout(env.Ctx(), 5*time.Second)
		defer cancel()
		if _, err := cli.MemberAdd(ctx, []string{c.peerURL(m)}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if err != nil {
		t.Fatal(err)
	}
	c.members = append(c.members, m)
	return m
}

// grow adds n members, each with its Pod.
func (c *coreosCluster) grow(n int) {
	c.s.t.Helper()
	for range n {
		c.pod(c.memberAdd(), "existing", "")
	}
}

// writeStatus writes the status the operator kept of a running cluster
// whose members are ready.
func (c *coreosCluster) writeStatus(ready []string) {
	t := c.s.t
	t.Helper()
	if _, err := c.s.env.API.UpdateStatus(harness.Ref{Type: harness.TypeEtcdCluster, Namespace: ns, Name: exampleName}, uidOf(c.parent), map[string]any{
		"phase": "Running", "size": len(ready), "serviceName": exampleName + "-client", "clientPort": 2379, "currentVersion": faultVersion,
		"members":    map[string]any{"ready": ready},
		"conditions": []any{map[string]any{"type": "Available", "status": "True", "reason": "Cluster available"}},
	}); err != nil {
		t.Fatal(err)
	}
}

// migrate is the migration's step (docs/migrating.md): the Pods and
// Services labelled as the EtcdCluster's children; then Metacontroller,
// and so the hook, starts.
func (c *coreosCluster) migrate() {
	t, env := c.s.t, c.s.env
	t.Helper()
	uid := uidOf(c.parent)
	for _, typ := range []string{harness.TypePod, harness.TypeService} {
		for _, obj := range env.API.List(typ, ns) {
			if _, err := env.API.Mutate(harness.RefOf(obj), func(o harness.Object) error {
				md, _ := o["metadata"].(map[string]any)
				labels, _ := md["labels"].(map[string]any)
				if labels == nil {
					labels = map[string]any{}
					md["labels"] = labels
				}
				labels[harness.LabelControllerUID] = uid
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.labelled = true
	env.MC.Start(env.Ctx())
}

// waitTakenOver waits for the hook to take the cluster over as it is
// (Adopted, Ready with every member) and checks that nothing moved: the
// Pods and member IDs of before, no restart, and no membership change
// among the hook's logged actions past the first logged. It reports
// whether the takeover happened.
func (c *coreosCluster) waitTakenOver(before faultWorld, logged int) bool {
	s, t := c.s, c.s.t
	t.Helper()
	n := len(c.members)
	start := time.Now()
	st := s.waitParent(time.Minute, fmt.Sprintf("taken over: Adopted, Ready at %d", n), func(st ParentStatus) bool {
		adopted, _ := st.Condition("Adopted")
		ready, _ := st.Condition("Ready")
		return adopted == "True" && ready == "True" && st.ReadyMembers == n
	})
	if t.Failed() {
		return false
	}
	t.Logf("taken over in %s: %s", time.Since(start).Round(100*time.Millisecond), st.ConditionMessage("Adopted"))
	s.checkWorld("taken over", before, c.members)
	for _, p := range s.c.Pods() {
		if p.Restarts != 0 {
			t.Errorf("taken over: member %s restarted %d times", p.Name, p.Restarts)
		}
	}
	for _, a := range s.loggedActions()[logged:] {
		t.Errorf("the takeover changed the membership: %+v", a)
	}
	return true
}

// moveToHookPods asks for the move onto the hook's own Pods (the rollout
// annotation) and waits until no member runs on a Pod the CoreOS operator
// made: no Adopted condition, Ready with size members. It reports whether
// the move ended.
func (c *coreosCluster) moveToHookPods(size int) bool {
	s, t := c.s, c.s.t
	t.Helper()
	if _, err := s.env.MC.AnnotateParent(ns, exampleName, "etcd.database.coreos.com/rollout", "moved"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.waitParent(5*time.Minute, fmt.Sprintf("every member on the hook's Pods: no Adopted condition, Ready at %d", size), func(st ParentStatus) bool {
		adopted, _ := st.Condition("Adopted")
		ready, _ := st.Condition("Ready")
		names := s.c.PodNames()
		return adopted == "" && ready == "True" && st.ReadyMembers == size && len(names) == size &&
			!slices.ContainsFunc(names, func(n string) bool { return slices.Contains(c.members, n) })
	})
	if t.Failed() {
		return false
	}
	t.Logf("moved onto the hook's Pods in %s: %s", time.Since(start).Round(100*time.Millisecond), strings.Join(s.c.PodNames(), ", "))
	return true
}
