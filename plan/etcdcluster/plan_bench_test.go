package etcdcluster

import (
	"fmt"
	"testing"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// BenchmarkPlanSteady is the planner's share of a steady sync: a converged
// cluster, every member ready and answering.
func BenchmarkPlanSteady(b *testing.B) {
	for _, n := range []int{1, 3, 5, 7} {
		o := observed(newCluster(n, "3.6.16"))
		o.Cluster.Status.Phase = v1beta2.PhaseRunning
		o.Membership = memberList(1)
		for i := range n {
			o.Pods[name(i)] = readyPod(name(i))
			o.Membership.Members = append(o.Membership.Members, member(uint64(i+1), name(i)))
		}
		if d := Plan(o); !d.Settled(o) {
			b.Fatalf("%d members: not a steady cluster: %+v", n, d.Status)
		}
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Plan(o)
			}
		})
	}
}
