package reconcile

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdhook/etcd-hook/api/v1beta2"
	"github.com/etcdhook/etcd-hook/etcdclient"
	"github.com/etcdhook/etcd-hook/membership"
	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// Recorder counts membership actions by type and result.
type Recorder interface {
	MembershipAction(action membership.ActionType, result string)
}

// Results recorded for membership actions.
const (
	ResultOK       = "ok"
	ResultNotReady = "not_ready"
	ResultError    = "error"
)

// Reconciler implements hooks.Syncer[*EarlyRead].
type Reconciler struct {
	Dialer   etcdclient.Dialer
	Recorder Recorder
	Logger   *slog.Logger
	Now      func() time.Time
	Random   io.Reader
	// AgentImage is this project's image, which a restored cluster's seed
	// runs to fetch its snapshot.
	AgentImage string
	// SecretPropagation and FilesystemResizeGrace are
	// etcdcluster.Observed's.
	SecretPropagation     time.Duration
	FilesystemResizeGrace time.Duration
}

// Sync observes, plans, acts at most once, and plans the answer.
//
// The first plan rests on a member's local copy of the member list, read
// in the same round trip as the members' statuses; when it changes nothing
// (a steady cluster, every periodic resync), it is the answer. Otherwise
// the list is read again through the quorum and the plan made again on
// it: every change is decided on a linearizable list.
//
// early is the read Prepare began for this request, or nil.
func (r *Reconciler) Sync(ctx context.Context, o *etcdcluster.Observed, early *EarlyRead) (etcdcluster.Decision, error) {
	d, err := r.sync(ctx, o, early)
	if err == nil && !o.Finalizing {
		r.logProgress(o, d)
	}
	return d, err
}

// logProgress says in the log what the answer changes in Pods and Secrets
// (a member restarted, reimaged, replaced), which the membership steps'
// own lines do not cover: a reader of the log sees every change the hook
// made, in order. It logs only when the Progressing condition's message
// changes, so a steady cluster's resyncs log nothing.
func (r *Reconciler) logProgress(o *etcdcluster.Observed, d etcdcluster.Decision) {
	was, _ := progressing(o.Cluster.Status.Conditions)
	now, ok := progressing(d.Status.Conditions)
	if !ok || (now.Status == was.Status && now.Message == was.Message) {
		return
	}
	if now.Status == metav1.ConditionTrue {
		r.log(o).Info("progressing", "reason", now.Reason, "message", now.Message)
	} else if was.Status == metav1.ConditionTrue {
		r.log(o).Info("converged", "reason", now.Reason, "message", now.Message)
	}
}

func progressing(conditions []v1beta2.ClusterCondition) (v1beta2.ClusterCondition, bool) {
	for _, c := range conditions {
		if c.Type == v1beta2.ConditionProgressing {
			return c, true
		}
	}
	return v1beta2.ClusterCondition{}, false
}

func (r *Reconciler) sync(ctx context.Context, o *etcdcluster.Observed, early *EarlyRead) (etcdcluster.Decision, error) {
	o.Now = r.now()
	o.AgentImage = r.AgentImage
	o.SecretPropagation = r.SecretPropagation
	o.FilesystemResizeGrace = r.FilesystemResizeGrace
	suffix, err := r.freshSuffix()
	if err != nil {
		return etcdcluster.Decision{}, err
	}
	o.FreshSuffix = suffix
	if o.Finalizing {
		return etcdcluster.Plan(o), nil
	}

	cluster := r.observe(ctx, o, early)
	if cluster != nil && o.Membership != nil && etcdcluster.NeedsAuth(o) {
		r.observeAuth(ctx, o, cluster)
	}
	if o.Membership != nil {
		// Done already if observe waited for the early read.
		etcdcluster.Derive(o)
	}
	d := etcdcluster.Plan(o)
	if o.Membership == nil || d.Settled(o) {
		return d, nil
	}
	ms, err := cluster.Confirm(ctx)
	r.record(o, ms, err)
	d = etcdcluster.Plan(o)
	if d.Action == nil || o.Membership == nil {
		return d, nil
	}

	action := *d.Action
	log := r.log(o)
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
	o.Acted = &etcdcluster.Outcome{Action: action, Err: err}
	return etcdcluster.Plan(o), nil
}

// observe reads the membership through the client URLs of the member Pods
// that run, or takes the read Prepare started for exactly those.
func (r *Reconciler) observe(ctx context.Context, o *etcdcluster.Observed, early *EarlyRead) etcdclient.Cluster {
	endpoints := runningEndpoints(o)
	if len(endpoints) == 0 {
		o.MembershipError = "no member Pod is running"
		return nil
	}
	if early != nil && early.covers(endpoints) {
		// What the planner works out from the request alone is worked
		// out while the read is in flight, not after it.
		etcdcluster.Derive(o)
		select {
		case <-early.done:
			r.record(o, early.membership, early.err)
			return early.cluster
		case <-ctx.Done():
			r.record(o, nil, ctx.Err())
			return nil
		}
	}
	cluster, err := r.Dialer.Cluster(endpoints, operatorCredentials(o))
	if err != nil {
		o.MembershipError = err.Error()
		return nil
	}
	ms, err := cluster.Membership(ctx)
	r.record(o, ms, err)
	return cluster
}

// observeAuth reads etcd's authentication, for spec.auth.
func (r *Reconciler) observeAuth(ctx context.Context, o *etcdcluster.Observed, cluster etcdclient.Cluster) {
	st, err := cluster.Auth(ctx)
	o.Auth, o.AuthError = st, ""
	if err != nil {
		r.log(o).Warn("cannot read etcd authentication", "error", err)
		o.AuthError = err.Error()
	}
}

func (r *Reconciler) record(o *etcdcluster.Observed, ms *membership.Membership, err error) {
	o.Membership, o.MembershipError = ms, ""
	if err != nil {
		r.log(o).Warn("cannot read etcd membership", "error", err)
		o.MembershipError = err.Error()
	}
}

// log is the logger of the cluster's lines, made when there is one to
// write: a steady sync writes none.
func (r *Reconciler) log(o *etcdcluster.Observed) *slog.Logger {
	return r.Logger.With("namespace", o.Cluster.Namespace, "name", o.Cluster.Name)
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
	buf := make([]byte, etcdcluster.SuffixLength)
	if _, err := io.ReadFull(random, buf); err != nil {
		return "", err
	}
	return etcdcluster.RandomSuffix(buf), nil
}
