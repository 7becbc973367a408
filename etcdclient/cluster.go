package etcdclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcdhook/etcd-hook/membership"
)

// Cluster is one etcd cluster as one sync sees it.
type Cluster interface {
	// Membership reads what each member says about itself and one
	// member's local copy of the member list, in one round trip. The list
	// may lag etcd's latest change by a moment: enough to see that nothing
	// needs doing, never to decide a change on. Without a voter that knows
	// a leader it comes back marked Stale.
	Membership(ctx context.Context) (*membership.Membership, error)
	// Confirm reads the member list again through the leader and a
	// quorum, which is what a change is decided on, keeping what the
	// members said in the last Membership. A list that cannot be read so
	// comes back marked Stale.
	Confirm(ctx context.Context) (*membership.Membership, error)
	// Apply makes one membership change and returns the member list that
	// results from it.
	Apply(ctx context.Context, a membership.Action) ([]membership.Member, error)
	// Auth reads etcd's authentication: on or off, users and roles.
	Auth(ctx context.Context) (*membership.AuthState, error)
}

// Dialer hands out a Cluster for a set of member endpoints.
type Dialer interface {
	// Cluster returns the cluster reached through endpoints, the client
	// URLs of its running members. creds is the client certificate for
	// members that serve TLS (https endpoints), nil for a plain cluster.
	Cluster(endpoints []string, creds *ClientTLS) (Cluster, error)
}

// Timeouts. The sum of an observation and an action stays well under
// Metacontroller's 10 s hook timeout.
const (
	// CallTimeout bounds each etcd call.
	CallTimeout = 2 * time.Second
	// ObserveTimeout bounds the whole read of a cluster's state; the reads
	// run in parallel within it.
	ObserveTimeout = 1500 * time.Millisecond
	// ConnectTimeout bounds a call on a connection that is not up yet,
	// dial included: far more than a member that answers takes, and a
	// third of what a member that does not answer would otherwise cost.
	ConnectTimeout = 500 * time.Millisecond
)

// ErrNotReady means etcd refused a step only because the cluster is not
// ready for it yet, such as promoting a learner that has not caught up.
// The step is retried on a later sync; it is not a failure.
var ErrNotReady = errors.New("etcd is not ready for this step yet")

func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, err)
}
