package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/etcdhook/etcd-hook/agent/report"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// BackupOptions is one backup run.
type BackupOptions struct {
	// Endpoints are client URLs of the cluster's members, called with the
	// scheme they give: https ones need TLS.
	Endpoints []string
	// TLS is the client certificate for members that serve TLS (see
	// LoadClientTLS); nil for plain HTTP.
	TLS *tls.Config
	// Periodic names the object "<key>_v<revision>_<time>" and prunes to
	// MaxBackups; otherwise the object is the key itself, as in a CoreOS
	// one-shot backup.
	Periodic   bool
	MaxBackups int
	// Timeout bounds the whole run.
	Timeout time.Duration
	Logger  *slog.Logger
	Now     func() time.Time
}

// What is stored with each object: user metadata (x-amz-meta-*) set when
// the upload starts, and the sha256 of the whole object as a tag, set once
// it is known.
const (
	MetaRevision  = "etcd-revision"
	MetaVersion   = "etcd-version"
	MetaClusterID = "etcd-cluster-id"
	MetaSHA256    = "sha256"
)

// ErrNoQuorum means no member could serve a linearizable read: a snapshot
// of such a member may miss acknowledged writes, so none is taken.
var ErrNoQuorum = errors.New("no member answered a linearizable read: the cluster is unreachable or has lost its quorum")

// Store is where backups go: an S3 bucket or a volume.
type Store interface {
	// Put stores r under key, whole or not at all: a failure, including
	// r's own at its very end, leaves nothing new and an earlier object
	// under key as it was.
	Put(ctx context.Context, key string, r io.Reader, meta map[string]string) error
	// Tag adds what is known once the object is stored (its sha256).
	Tag(ctx context.Context, key string, kv map[string]string) error
	// List returns the objects whose keys start with prefix.
	List(ctx context.Context, prefix string) ([]StoredObject, error)
	Delete(ctx context.Context, key string) error
	// Location is how an object is named in status.
	Location(key string) string
}

// Backup takes one snapshot and stores it under base (a one-shot) or
// base_v<revision>_<time> (periodic). The snapshot comes from the
// member with the highest revision among those that answer, once that
// member has proven it is part of a quorum; its etcdRevision is read
// through the quorum just before the snapshot starts, so every write
// acknowledged at or before it is in the snapshot.
func Backup(ctx context.Context, opts BackupOptions, store Store, base string) report.BackupResult {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	res := report.BackupResult{Start: now().UTC()}
	fail := func(err error) report.BackupResult {
		res.Succeeded, res.Reason, res.End = false, err.Error(), now().UTC()
		log.Error("backup failed", "reason", res.Reason)
		return res
	}
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, opts.Timeout, fmt.Errorf("the backup took longer than its timeout of %s", opts.Timeout))
		defer cancel()
	}
	if len(opts.Endpoints) == 0 {
		return fail(errors.New("no etcd endpoint to back up"))
	}
	if err := needsTLS(opts.Endpoints, opts.TLS); err != nil {
		return fail(err)
	}

	member, err := pickMember(ctx, opts.Endpoints, opts.TLS)
	if err != nil {
		return fail(cause(ctx, err))
	}
	res.Member, res.EtcdVersion, res.ClusterID, res.EtcdRevision = member.endpoint, member.version, member.clusterID, member.revision
	key := base
	if opts.Periodic {
		key = PeriodicKey(key, member.revision, res.Start)
	}
	res.Location = store.Location(key)
	log.Info("taking a snapshot", "member", member.endpoint, "revision", member.revision, "version", member.version, "location", res.Location)

	// A fixed flow-control window: gRPC otherwise grows it with the
	// transfer (up to 16 MiB on a fast link), and the agent's memory with it.
	cli, err := newClient(member.endpoint, opts.TLS, grpc.WithInitialWindowSize(snapshotWindow), grpc.WithInitialConnWindowSize(snapshotWindow))
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	stream, err := cli.Snapshot(ctx)
	if err != nil {
		return fail(cause(ctx, fmt.Errorf("snapshot of %s: %w", member.endpoint, err)))
	}
	defer stream.Close()
	verified := newVerifyingReader(stream)
	meta := map[string]string{
		MetaRevision:  strconv.FormatInt(member.revision, 10),
		MetaVersion:   member.version,
		MetaClusterID: member.clusterID,
	}
	if err := store.Put(ctx, key, verified, meta); err != nil {
		return fail(cause(ctx, err))
	}
	res.Size, res.SHA256 = verified.Size(), verified.ObjectSHA256()
	if err := store.Tag(ctx, key, map[string]string{MetaSHA256: res.SHA256}); err != nil {
		// The object is whole and verified; only its label is missing.
		log.Warn("the backup is stored, but its sha256 tag could not be set", "error", err)
	}

	if opts.Periodic && opts.MaxBackups > 0 {
		objs, err := store.List(ctx, base)
		if err != nil {
			return fail(fmt.Errorf("the backup is stored at %s, but retention could not list the older ones: %w", res.Location, cause(ctx, err)))
		}
		keys := make([]string, 0, len(objs))
		for _, o := range objs {
			keys = append(keys, o.Key)
		}
		for _, old := range Expired(base, keys, opts.MaxBackups, key) {
			if err := store.Delete(ctx, old); err != nil {
				return fail(fmt.Errorf("the backup is stored at %s, but retention could not delete %s: %w", res.Location, old, cause(ctx, err)))
			}
			log.Info("deleted an older backup", "key", old)
			res.Pruned++
		}
	}
	res.Succeeded, res.End = true, now().UTC()
	log.Info("backup stored", "location", res.Location, "size", res.Size, "sha256", res.SHA256, "revision", res.EtcdRevision, "seconds", res.End.Sub(res.Start).Seconds())
	return res
}

// cause prefers the reason a context ended (the run's timeout) over the
// bare "context deadline exceeded" of the call it cut short.
func cause(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) && ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", c, err)
	}
	return err
}

type memberState struct {
	endpoint  string
	version   string
	clusterID string
	revision  int64
}

// pickMember asks every member for its status, then proves a quorum
// through the one with the highest revision. The members are those the
// endpoints name and those etcd lists, so that a client Service's URL (or
// a CoreOS etcdEndpoints list naming a few members) still finds the
// member furthest ahead.
func pickMember(ctx context.Context, endpoints []string, tc *tls.Config) (memberState, error) {
	cli, err := newClientFor(endpoints, tc)
	if err != nil {
		return memberState{}, err
	}
	defer cli.Close()
	candidates := append([]string(nil), endpoints...)
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if list, err := cli.MemberList(lctx); err == nil {
		for _, m := range list.Members {
			for _, u := range m.ClientURLs {
				if !slices.Contains(candidates, u) {
					candidates = append(candidates, u)
				}
			}
		}
	}
	cancel()

	type answer struct {
		st  memberState
		err error
	}
	answers := make([]answer, len(candidates))
	var wg sync.WaitGroup
	for i, ep := range candidates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A member list of a TLS cluster names https URLs even when
			// the endpoints given did not.
			if err := needsTLS([]string{ep}, tc); err != nil {
				answers[i].err = err
				return
			}
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			st, err := cli.Status(sctx, ep)
			if err != nil {
				answers[i].err = fmt.Errorf("%s: %w", ep, err)
				return
			}
			answers[i].st = memberState{endpoint: ep, version: st.Version, clusterID: strconv.FormatUint(st.Header.ClusterId, 16), revision: st.Header.Revision}
		}()
	}
	wg.Wait()
	var best *memberState
	var errs []error
	for i := range answers {
		switch a := &answers[i]; {
		case a.err != nil:
			errs = append(errs, a.err)
		case best == nil || a.st.revision > best.revision:
			best = &a.st
		}
	}
	if best == nil {
		err := fmt.Errorf("no etcd member answered: %w", errors.Join(errs...))
		if why := explainTLS(ctx, candidates, tc); why != "" {
			err = fmt.Errorf("%w; %s", err, why)
		}
		return memberState{}, err
	}
	one, err := newClient(best.endpoint, tc)
	if err != nil {
		return memberState{}, err
	}
	defer one.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := one.Get(rctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return memberState{}, fmt.Errorf("%w (%s: %v)", ErrNoQuorum, best.endpoint, err)
	}
	best.revision = resp.Header.Revision
	return *best, nil
}

// snapshotWindow is the gRPC window of the snapshot stream.
const snapshotWindow = 2 << 20

func newClient(endpoint string, tc *tls.Config, opts ...grpc.DialOption) (*clientv3.Client, error) {
	return newClientFor([]string{endpoint}, tc, opts...)
}

// newClientFor dials the endpoints with the schemes they give: clientv3
// uses tc for https endpoints only, and checks each member's certificate
// against the host name of its own URL.
func newClientFor(endpoints []string, tc *tls.Config, opts ...grpc.DialOption) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tc,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: opts,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", endpoints, err)
	}
	return cli, nil
}

// WriteResult writes the result where the kubelet reads the termination
// message.
func WriteResult(path string, r report.BackupResult) error {
	return writeTerminationMessage(path, &r, &r.Reason)
}

// writeTerminationMessage writes v as JSON where the kubelet reads the
// termination message, shortening *reason when the whole would pass the
// kubelet's 4096 bytes: the hook must be able to parse what it reads.
func writeTerminationMessage(path string, v any, reason *string) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(data) > 4000 {
		*reason = (*reason)[:min(len(*reason), 1000)] + "…"
		data, _ = json.Marshal(v)
	}
	return os.WriteFile(path, data, 0o644)
}
