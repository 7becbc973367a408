package etcdbackup

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
)

// A final backup is the run an EtcdCluster on emptyDir asks for before
// it hibernates (its spec.hibernation.backup names this EtcdBackup): the
// cluster fences writes off, then writes the request into its
// status.hibernation, which this planner reads from the related cluster.
// The run is one of this EtcdBackup's, recorded as any other (lastRun,
// lastBackup) with the request it answers, so that the cluster reads the
// outcome from this status. It is stored under a name of its own, as a
// periodic backup's, whatever the policy: it must overwrite no backup a
// one-shot took, and retention deletes nothing for it. A failed final run
// is retried with the usual backoff while the cluster asks.
//
// Once the cluster is hibernated, or on its way there and asking for
// nothing, no run is started: there is nothing to back up, and a run would
// only fail.
const (
	// AnnotationRequest on a run Pod is the hibernation request it
	// answers, so that a run whose start the status missed is known.
	AnnotationRequest = "etcd.database.coreos.com/final-backup-request"
	// ReasonClusterHibernated: the cluster hibernates; no run is due.
	ReasonClusterHibernated = "ClusterHibernated"
)

// hibernatingCluster is the EtcdCluster clusterName names when it
// hibernates (spec.hibernated), or nil.
func (p *planner) hibernatingCluster() *v1beta2.EtcdCluster {
	b := p.o.Backup
	c, ok := p.o.Clusters[b.Spec.ClusterName]
	if b.Spec.ClusterName == "" || !ok || !c.Spec.Hibernated {
		return nil
	}
	return c
}

// finalRequest is the final backup the cluster asks of this EtcdBackup,
// or "".
func (p *planner) finalRequest() string {
	c := p.hibernatingCluster()
	if c == nil {
		return ""
	}
	h := c.Status.Hibernation
	if h == nil || h.Backup != p.o.Backup.Name || h.Request == "" || h.Source != nil {
		return ""
	}
	return h.Request
}

// holdForHibernation keeps a run from starting while the cluster
// hibernates, unless it asks for its final backup.
func (p *planner) holdForHibernation(request string) bool {
	c := p.hibernatingCluster()
	if request != "" || c == nil {
		return false
	}
	p.progressing = cond{metav1.ConditionFalse, ReasonClusterHibernated,
		fmt.Sprintf("EtcdCluster %s hibernates (spec.hibernated): no backup is taken until it wakes", c.Name)}
	return true
}
