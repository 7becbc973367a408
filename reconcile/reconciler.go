package reconcile

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/sync"
)

// Recorder counts membership actions by type and result.
type Recorder interface {
	MembershipAction(action sync.ActionType, result string)
}

// Results recorded for membership actions.
const (
	ResultOK       = "ok"
	ResultNotReady = "not_ready"
	ResultError    = "error"
)

// Reconciler implements hooks.Syncer.
type Reconciler struct {
	Dialer   etcdclient.Dialer
	Recorder Recorder
	Logger   *slog.Logger
	Now      func() time.Time
	Random   io.Reader
}

// Sync observes, plans, acts at most once, and plans the answer.
func (r *Reconciler) Sync(ctx context.Context, o *sync.Observed) (sync.Decision, error) {
	c := o.Cluster
	log := r.Logger.With("namespace", c.Namespace, "name", c.Name)
	o.Now = r.now()
	suffix, err := r.freshSuffix()
	if err != nil {
		return sync.Decision{}, err
	}
	o.FreshSuffix = suffix

	var cluster etcdclient.Cluster
	if !o.Finalizing {
		cluster = r.observe(ctx, log, o)
	}
	d := sync.Plan(o)
	if d.Action == nil || cluster == nil {
		return d, nil
	}

	action := *d.Action
	members, err := cluster.Apply(ctx, action)
	switch {
	case errors.Is(err, etcdclient.ErrNotReady):
		r.Recorder.MembershipAction(action.Type, ResultNotReady)
		log.Info("membership step not possible yet", "action", action.String(), "error", err)
		d.Action = nil
		return d, nil
	case err != nil:
		r.Recorder.MembershipAction(action.Type, ResultError)
		log.Error("membership step failed", "action", action.String(), "error", err)
	default:
		r.Recorder.MembershipAction(action.Type, ResultOK)
		log.Info("membership step made", "action", action.String(), "reason", action.Reason)
		o.Membership = o.Membership.WithMembers(members)
	}
	o.Acted = &sync.Outcome{Action: action, Err: err}
	return sync.Plan(o), nil
}

// observe reads the membership through the client URLs of the member Pods
// that run: a Pod that does not run cannot answer, and asking it would only
// spend the sync's time budget.
func (r *Reconciler) observe(ctx context.Context, log *slog.Logger, o *sync.Observed) etcdclient.Cluster {
	c := o.Cluster
	domain := o.Cluster.Spec.Pod.ClusterDomainSuffix()
	var endpoints []string
	for name, pod := range o.Pods {
		if pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil {
			endpoints = append(endpoints, sync.ClientURL(name, c.Name, c.Namespace, domain))
		}
	}
	if len(endpoints) == 0 {
		o.MembershipError = "no member Pod is running"
		return nil
	}
	cluster, err := r.Dialer.Cluster(c.Namespace+"/"+c.Name+"/"+string(c.UID), endpoints)
	if err != nil {
		o.MembershipError = err.Error()
		return nil
	}
	ms, err := cluster.Membership(ctx)
	if err != nil {
		log.Warn("cannot read etcd membership", "error", err)
		o.MembershipError = err.Error()
		return nil
	}
	o.Membership = ms
	return cluster
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) freshSuffix() (string, error) {
	random := r.Random
	if random == nil {
		random = rand.Reader
	}
	buf := make([]byte, sync.SuffixLength)
	if _, err := io.ReadFull(random, buf); err != nil {
		return "", err
	}
	return sync.RandomSuffix(buf), nil
}
