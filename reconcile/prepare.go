package reconcile

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// Prepare starts the sync's local read of etcd as soon as the parent is
// decoded, while the children are: decoding the Pods is most of a steady
// sync's work, and the read's round trip then overlaps it instead of
// following it. It guesses the members from the ready ones the parent's
// status lists; Sync takes the read only if the running Pods turn out to
// be exactly those, and reads afresh otherwise. It returns nil when it
// began nothing.
func (r *Reconciler) Prepare(ctx context.Context, o *etcdcluster.Observed) *EarlyRead {
	if o.Finalizing || len(o.Cluster.Status.Members.Ready) == 0 {
		return nil
	}
	endpoints := make([]string, 0, len(o.Cluster.Status.Members.Ready))
	addr := plan.AddressesOf(o.Cluster)
	for _, name := range o.Cluster.Status.Members.Ready {
		endpoints = append(endpoints, addr.ClientURL(name))
	}
	slices.Sort(endpoints)
	cluster, err := r.Dialer.Cluster(endpoints, operatorCredentials(o))
	if err != nil {
		return nil
	}
	early := &EarlyRead{endpoints: endpoints, cluster: cluster, done: make(chan struct{})}
	go func() {
		defer close(early.done)
		early.membership, early.err = cluster.Membership(ctx)
	}()
	return early
}

// EarlyRead is a local read of etcd begun by Prepare, which the same
// request's Sync takes.
type EarlyRead struct {
	endpoints []string
	cluster   etcdclient.Cluster
	done      chan struct{}
	// Set before done is closed.
	membership *membership.Membership
	err        error
}

func (e *EarlyRead) covers(endpoints []string) bool { return slices.Equal(e.endpoints, endpoints) }

// runningEndpoints are the client URLs of the member Pods that run, sorted:
// a Pod that does not run cannot answer, and asking it would only spend
// the sync's time budget. Pods of another etcd cluster than the one being
// reconciled (a restore's, see plan/etcdcluster/restore.go) are never asked.
func runningEndpoints(o *etcdcluster.Observed) []string {
	var endpoints []string
	excluded := etcdcluster.ExcludedFromMembership(o)
	for name, pod := range o.Pods {
		if pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil && !excluded[name] {
			endpoints = append(endpoints, etcdcluster.MemberClientURL(o.Cluster, pod))
		}
	}
	slices.Sort(endpoints)
	return endpoints
}

// operatorCredentials is the client certificate of spec.TLS's
// operatorSecret, as the sync request carries it, or nil. Its ID changes
// with the Secret's resourceVersion, so a rotated certificate is dialed
// with on the next sync; a Secret that is missing or lacks a key gives
// none, and the https members then fail to answer (the planner says why).
func operatorCredentials(o *etcdcluster.Observed) *etcdclient.ClientTLS {
	name := o.Cluster.TLSSecrets().Operator
	s, ok := o.SecretChildren[name]
	if own := o.Cluster.AutoTLSSecrets().Operator; !ok && name != "" && o.SecretChildren[own] != nil {
		// Moving from spec.TLS.auto to spec.TLS.static: the hook's own
		// certificate is trusted by every member, and trusts what every
		// member serves, until the last one moved (its bundle holds both
		// sides' CAs).
		name, s, ok = own, o.SecretChildren[own], true
	}
	if !ok {
		s, ok = o.Secrets[name]
	}
	if st := o.Cluster.Status.TLS; !ok && o.Cluster.Spec.TLS.IsAuto() && st != nil && st.Static != nil && st.Static.OperatorSecret != "" {
		// Moving from spec.TLS.static, before the hook's own copy of
		// this certificate is stored.
		name = st.Static.OperatorSecret
		s, ok = o.Secrets[name]
	}
	if name == "" || !ok {
		return nil
	}
	return &etcdclient.ClientTLS{
		ID:   fmt.Sprintf("%s/%s/%s/%s", s.Namespace, s.Name, s.UID, s.ResourceVersion),
		Cert: s.Data[v1beta2.ClientCertKey], Key: s.Data[v1beta2.ClientKeyKey], CA: s.Data[v1beta2.ClientCAKey],
	}
}
