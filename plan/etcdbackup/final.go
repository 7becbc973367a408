package etcdbackup

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// finalRequest is the final backup the cluster asks of this EtcdBackup,
// or "".
func (p *planner) finalRequest() string {
	b := p.o.Backup
	c, ok := p.o.Clusters[b.Spec.ClusterName]
	if b.Spec.ClusterName == "" || !ok || !c.Spec.Hibernated {
		return ""
	}
	h := c.Status.Hibernation
	if h == nil || h.Backup != b.Name || h.Request == "" || h.Source != nil {
		return ""
	}
	return h.Request
}

// hibernating says why no run starts for a cluster that hibernates and
// asks for nothing, or "".
func (p *planner) hibernating() string {
	b := p.o.Backup
	c, ok := p.o.Clusters[b.Spec.ClusterName]
	if b.Spec.ClusterName == "" || !ok || !c.Spec.Hibernated {
		return ""
	}
	return fmt.Sprintf("EtcdCluster %s hibernates (spec.hibernated): no backup is taken until it wakes", c.Name)
}

// holdForHibernation keeps a run from starting while the cluster
// hibernates, unless it asks for its final backup.
func (p *planner) holdForHibernation(request string) bool {
	why := p.hibernating()
	if request != "" || why == "" {
		return false
	}
	p.progressing = cond{metav1.ConditionFalse, ReasonClusterHibernated, why}
	return true
}
