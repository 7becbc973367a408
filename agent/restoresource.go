package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/etcdhook/etcd-hook/agent/report"
	"github.com/minio/minio-go/v7"
)

// S3Source is where a restore's snapshot is, in a CoreOS EtcdRestore's
// terms.
type S3Source struct {
	// Path is "<bucket>/<key>".
	Path string
	// Endpoint is the store's URL; empty means AWS S3.
	Endpoint       string
	ForcePathStyle bool
	// AWSDir holds the AWS shared files of the mounted awsSecret.
	AWSDir string
}

// storedSnapshot is an opened backup: its bytes and what was stored with
// it (user metadata and tags, the same names as our backups write).
type storedSnapshot struct {
	body io.ReadCloser
	// size is the object's length, or -1 when the source cannot tell.
	size int64
	meta map[string]string
}

// snapshotSource is a restore's backup: an S3 object or a file.
type snapshotSource interface {
	// location names the backup in reasons and the result.
	location() string
	// open starts reading it; its errors are unusable (see unusable)
	// when retrying cannot help.
	open(ctx context.Context) (storedSnapshot, error)
}

// s3Source reads one object.
type s3Source struct {
	cfg S3Source
	log *slog.Logger
}

func (s s3Source) location() string { return "s3://" + s.cfg.Path }

// s3Unusable are the answers of an S3 store that another attempt will get
// again: the object or bucket is not there, or the credentials cannot read
// it. Anything else (5xx, throttling, the network) may pass.
var s3Unusable = map[string]bool{
	"NoSuchKey":             true,
	"NoSuchBucket":          true,
	"AccessDenied":          true,
	"InvalidAccessKeyId":    true,
	"SignatureDoesNotMatch": true,
	"XAdminUserNotFound":    true, // versitygw's answer to an unknown access key
}

func (s s3Source) open(ctx context.Context) (storedSnapshot, error) {
	profile, err := LoadAWSProfile(s.cfg.AWSDir)
	if errors.Is(err, fs.ErrNotExist) {
		// The Secret's volume is optional, so that a missing Secret is a
		// reason in the result rather than a Pod stuck in ContainerCreating.
		return storedSnapshot{}, unusable(fmt.Errorf("cannot read the backup %s: the awsSecret is missing or has no %q key (%s does not exist)",
			s.location(), report.CredentialsFile, filepath.Join(s.cfg.AWSDir, report.CredentialsFile)))
	}
	if err != nil {
		return storedSnapshot{}, unusable(fmt.Errorf("cannot read the backup %s: the awsSecret: %w", s.location(), err))
	}
	cfg := S3Config{Path: s.cfg.Path, Endpoint: s.cfg.Endpoint, ForcePathStyle: s.cfg.ForcePathStyle, Profile: profile}
	store, err := NewS3Store(cfg)
	if err != nil {
		return storedSnapshot{}, unusable(fmt.Errorf("cannot read the backup %s: %w", s.location(), err))
	}
	key := cfg.Key()
	body, info, _, err := store.core.GetObject(ctx, store.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		code := minio.ToErrorResponse(err).Code
		err = store.describe("cannot read the backup "+s.location(), err)
		if s3Unusable[code] {
			return storedSnapshot{}, unusable(err)
		}
		return storedSnapshot{}, err
	}
	meta := map[string]string{}
	for k, v := range info.UserMetadata {
		meta[strings.ToLower(k)] = v
	}
	// Our backups tag the object with its sha256 once the stream has ended.
	// Reading tags is a separate permission that a restore's credentials
	// may lack; the object then goes unchecked against it, but is still
	// checked against etcd's trailer and --sha256.
	if t, err := store.core.Client.GetObjectTagging(ctx, store.bucket, key, minio.GetObjectTaggingOptions{}); err != nil {
		s.log.Warn("cannot read the backup's tags; its stored sha256 is not checked", "source", s.location(), "error", err)
	} else {
		for k, v := range t.ToMap() {
			meta[k] = v
		}
	}
	return storedSnapshot{body: body, size: info.Size, meta: meta}, nil
}

// fileSource reads a snapshot on a mounted volume, and "<file>.json" beside
// it when FileStore wrote it.
type fileSource struct{ path string }

func (f fileSource) location() string { return f.path }

func (f fileSource) open(context.Context) (storedSnapshot, error) {
	file, err := os.Open(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return storedSnapshot{}, unusable(fmt.Errorf("the backup file %s does not exist", f.path))
	}
	if err != nil {
		return storedSnapshot{}, fmt.Errorf("cannot read the backup file %s: %w", f.path, err)
	}
	fi, err := file.Stat()
	if err != nil {
		_ = file.Close()
		return storedSnapshot{}, fmt.Errorf("cannot read the backup file %s: %w", f.path, err)
	}
	if fi.IsDir() {
		_ = file.Close()
		return storedSnapshot{}, unusable(fmt.Errorf("the backup file %s is a directory", f.path))
	}
	meta := map[string]string{}
	switch data, err := os.ReadFile(f.path + metaSuffix); {
	case errors.Is(err, fs.ErrNotExist):
		// A snapshot put there by other means: etcd's trailer still checks it.
	case err != nil:
		_ = file.Close()
		return storedSnapshot{}, fmt.Errorf("cannot read the metadata of the backup file %s: %w", f.path, err)
	default:
		if err := json.Unmarshal(data, &meta); err != nil {
			_ = file.Close()
			return storedSnapshot{}, unusable(fmt.Errorf("the backup's metadata %s is not a JSON object of strings: %w", f.path+metaSuffix, err))
		}
	}
	return storedSnapshot{body: file, size: fi.Size(), meta: meta}, nil
}
