package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/agent/report"
)

// ChainFetch makes a restore fetch read a continuous backup: S3's path or
// File is its key (what the EtcdBackup names), or the key of one of its
// snapshots (which names its history too).
type ChainFetch struct {
	Target archive.Target
	// KeyFile holds the key of an encrypted chain (see LoadKey).
	KeyFile string
}

// chainLocation is where the chain is: the store, the backup's key in it,
// and the history a snapshot's key names ("" for the newest).
func (o FetchOptions) chainLocation() (store ObjectReader, base, history string, err error) {
	key := o.File
	if o.S3 != nil {
		profile, err := LoadAWSProfile(o.S3.AWSDir)
		if err != nil {
			return nil, "", "", unusable(fmt.Errorf("cannot read the backup s3://%s: the awsSecret: %w", o.S3.Path, err))
		}
		cfg := S3Config{Path: o.S3.Path, Endpoint: o.S3.Endpoint, ForcePathStyle: o.S3.ForcePathStyle, Profile: profile}
		s3, err := NewS3Store(cfg)
		if err != nil {
			return nil, "", "", unusable(err)
		}
		store, key = s3, cfg.Key()
	}
	base = key
	if i := strings.Index(key, archive.Dir); i >= 0 {
		base = key[:i]
		history, _, _ = strings.Cut(key[i+len(archive.Dir):], "/")
	}
	if o.S3 == nil {
		// A volume: the store's root is the directory the key is in.
		dir, name := filepath.Split(base)
		dir = filepath.Clean(dir)
		files, err := NewFileStore(dir, "")
		if err != nil {
			return nil, "", "", unusable(err)
		}
		store, base = fileReader{files, dir}, name
	}
	return store, base, history, nil
}

// fileReader names a volume's objects by their paths, as a restore of a
// file does.
type fileReader struct {
	*FileStore
	dir string
}

func (f fileReader) Location(key string) string { return filepath.Join(f.dir, key) }

func (o FetchOptions) chainSourceName() string {
	where := o.File
	if o.S3 != nil {
		where = "s3://" + o.S3.Path
	}
	return fmt.Sprintf("%s at %s", where, o.Chain.Target)
}

// fetchChain rebuilds the state at the chain's target into a file beside
// opts.Snapshot, makes the checks a fetched snapshot gets, and renames it
// into place.
func fetchChain(ctx context.Context, opts FetchOptions, res *report.RestoreResult, log *slog.Logger) (got verified, err error) {
	store, base, history, err := opts.chainLocation()
	if err != nil {
		return got, err
	}
	src := ChainSource{Store: store, Base: base, History: history, Target: opts.Chain.Target}
	if opts.Chain.KeyFile != "" {
		if src.Key, err = LoadKey(opts.Chain.KeyFile); err != nil {
			return got, unusable(err)
		}
	}
	dir := filepath.Dir(opts.Snapshot)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return got, fmt.Errorf("make the snapshot's directory: %w", err)
	}
	work, err := os.MkdirTemp(dir, filepath.Base(opts.Snapshot)+snapshotPartialInfix+"chain-")
	if err != nil {
		return got, err
	}
	defer os.RemoveAll(work)
	rebuilt := filepath.Join(work, "snapshot.db")
	log.Info("rebuilding from a continuous backup", "source", res.Source)
	chain, err := RestoreChain(ctx, src, work, rebuilt)
	if err != nil {
		return got, err
	}
	res.History, res.Deltas, res.Hashes = chain.History, chain.Deltas, chain.Hashes
	f, err := os.Open(rebuilt)
	if err != nil {
		return got, err
	}
	v := newVerifyingReader(f)
	_, err = io.Copy(io.Discard, v)
	f.Close()
	if err != nil {
		return got, err
	}
	if got, err = check(opts, res.Source, rebuilt, v, "", ""); err != nil {
		return got, err
	}
	if err := os.Remove(recordPath(opts.Snapshot)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return got, fmt.Errorf("remove the record of an earlier fetch: %w", err)
	}
	if err := os.Rename(rebuilt, opts.Snapshot); err != nil {
		return got, fmt.Errorf("write the snapshot: %w", err)
	}
	return got, nil
}
