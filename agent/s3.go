package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/tags"
)

// minio-go rather than aws-sdk-go-v2: it is a fraction of the size, speaks
// to every S3-compatible store without the checksum settings that newer
// aws-sdk-go-v2 releases need there, and its Core API exposes the
// multipart calls one by one, so that an upload is completed only after
// the snapshot has passed its hash check and aborted otherwise.

// PartSize is the size of one multipart part. Two parts are in memory at
// once (one being read, one being sent), whatever the database's size;
// 8 MiB parts allow objects of up to 80 GB (S3's 10,000 parts).
const PartSize = 8 << 20

// S3Config says where backups go, in the CoreOS EtcdBackup's terms.
type S3Config struct {
	// Path is "<bucket>/<key>".
	Path string
	// Endpoint is the store's URL; empty means AWS S3.
	Endpoint       string
	ForcePathStyle bool
	Profile        AWSProfile
}

// Bucket and Key split Path.
func (c S3Config) Bucket() string { b, _, _ := strings.Cut(c.Path, "/"); return b }
func (c S3Config) Key() string    { _, k, _ := strings.Cut(c.Path, "/"); return k }

// StoredObject is one object in the store.
type StoredObject struct {
	Key          string
	Size         int64
	LastModified time.Time
}

// S3Store writes and lists snapshots in one bucket.
type S3Store struct {
	core     minio.Core
	bucket   string
	where    string // for messages: the store's host
	partSize int
	// parts keeps part buffers between Puts.
	parts sync.Pool
}

// NewS3Store checks the configuration and builds the client; it does not
// reach the store yet.
func NewS3Store(cfg S3Config) (*S3Store, error) {
	if cfg.Bucket() == "" || cfg.Key() == "" {
		return nil, fmt.Errorf(`s3 path %q is not "<bucket>/<key>"`, cfg.Path)
	}
	host, secure := "s3.amazonaws.com", true
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("s3 endpoint %q is not an http(s) URL", cfg.Endpoint)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	lookup := minio.BucketLookupAuto
	if cfg.ForcePathStyle {
		lookup = minio.BucketLookupPath
	}
	p := cfg.Profile
	client, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(p.AccessKeyID, p.SecretAccessKey, p.SessionToken),
		Secure:       secure,
		Region:       p.Region,
		BucketLookup: lookup,
		// Retries are the hook's business (a failed run is retried with
		// backoff); a run gives up rather than outlive its timeout.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 client: %w", err)
	}
	return &S3Store{core: minio.Core{Client: client}, bucket: cfg.Bucket(), where: host, partSize: PartSize}, nil
}

// Location is how an object is named in status.
func (s *S3Store) Location(key string) string { return "s3://" + s.bucket + "/" + key }

// Put streams r into key with the given metadata. The object is stored
// only if r ends cleanly: any error, including the snapshot's hash check
// failing at the very end, leaves nothing, so no partial object is ever
// left where a backup is expected, and an object already at key stays as
// it was.
//
// An object that fits in one part (a continuous backup's delta, every
// second or so) is read whole first and stored with one request; a larger
// one is a multipart upload, aborted on any error. Either way at most two
// parts are in memory, in buffers the store offers the next Put (a
// sync.Pool, which the GC may empty), so that an archiver storing a delta
// a second does not allocate 16 MiB for each.
func (s *S3Store) Put(ctx context.Context, key string, r io.Reader, meta map[string]string) (err error) {
	first := s.buffer()
	defer func() { s.release(first, err) }()
	n, rerr := io.ReadFull(r, first)
	switch {
	case errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF):
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := s.core.Client.PutObject(ctx, s.bucket, key, bytes.NewReader(first[:n]), int64(n),
			minio.PutObjectOptions{UserMetadata: meta, ContentType: "application/octet-stream", DisableMultipart: true})
		if err != nil {
			return s.describe("upload "+key, err)
		}
		return nil
	case rerr != nil:
		return rerr
	}
	return s.putParts(ctx, key, first, r, meta)
}

// buffer is a part's buffer, kept from an earlier Put when there is one.
func (s *S3Store) buffer() []byte {
	if b, ok := s.parts.Get().(*[]byte); ok && cap(*b) >= s.partSize {
		return (*b)[:s.partSize]
	}
	return make([]byte, s.partSize)
}

// release keeps b for the next Put, unless the Put failed: the HTTP
// client may then still be sending it in a request it gave up on, and a
// later Put writing into it could send another object's bytes there.
func (s *S3Store) release(b []byte, err error) {
	if err != nil {
		return
	}
	b = b[:cap(b)]
	s.parts.Put(&b)
}

// putParts uploads first, then the rest of r, as a multipart upload.
func (s *S3Store) putParts(ctx context.Context, key string, first []byte, r io.Reader, meta map[string]string) (err error) {
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, key, minio.PutObjectOptions{UserMetadata: meta, ContentType: "application/octet-stream"})
	if err != nil {
		return s.describe("start the upload of "+key, err)
	}
	defer func() {
		if err == nil {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if aerr := s.core.AbortMultipartUpload(actx, s.bucket, key, id); aerr != nil {
			err = errors.Join(err, s.describe("abort the incomplete upload "+id, aerr))
		}
	}()

	type part struct {
		num int
		buf []byte
	}
	second := s.buffer()
	defer func() { s.release(second, err) }()
	free := make(chan []byte, 2)
	free <- second
	parts := make(chan part)
	uctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done []minio.CompletePart
	uploaded := make(chan error, 1)
	go func() {
		var uerr error
		for p := range parts {
			if uerr == nil {
				var op minio.ObjectPart
				op, uerr = s.core.PutObjectPart(uctx, s.bucket, key, id, p.num, bytes.NewReader(p.buf), int64(len(p.buf)), minio.PutObjectPartOptions{})
				if uerr != nil {
					uerr = s.describe(fmt.Sprintf("upload part %d of %s", p.num, key), uerr)
					cancel()
				} else {
					done = append(done, minio.CompletePart{PartNumber: p.num, ETag: op.ETag})
				}
			}
			free <- p.buf[:cap(p.buf)]
		}
		uploaded <- uerr
	}()

	var readErr error
	buf := first
	for num := 1; ; num++ {
		n, rerr := len(buf), error(nil)
		if num > 1 {
			buf = nil
			select {
			case buf = <-free:
			case <-uctx.Done():
			}
			if buf == nil {
				break
			}
			n, rerr = io.ReadFull(r, buf)
		}
		end := errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)
		if rerr != nil && !end {
			readErr = rerr
			break
		}
		if n > 0 {
			select {
			case parts <- part{num, buf[:n]}:
			case <-uctx.Done():
			}
		}
		if end {
			break
		}
	}
	close(parts)
	if uerr := <-uploaded; uerr != nil {
		return uerr
	}
	if readErr != nil {
		return readErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := s.core.CompleteMultipartUpload(ctx, s.bucket, key, id, done, minio.PutObjectOptions{}); err != nil {
		return s.describe("complete the upload of "+key, err)
	}
	return nil
}

// Tag sets key's tags. What is known only once the stream has ended (its
// sha256) goes with the object this way: user metadata is fixed when the
// upload starts, and replacing it would mean copying the whole object.
func (s *S3Store) Tag(ctx context.Context, key string, kv map[string]string) error {
	t, err := tags.NewTags(kv, true)
	if err != nil {
		return fmt.Errorf("tags for %s: %w", key, err)
	}
	if err := s.core.Client.PutObjectTagging(ctx, s.bucket, key, t, minio.PutObjectTaggingOptions{}); err != nil {
		return s.describe("tag "+key, err)
	}
	return nil
}

// List returns the objects whose keys start with prefix.
func (s *S3Store) List(ctx context.Context, prefix string) ([]StoredObject, error) {
	var out []StoredObject
	for obj := range s.core.Client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.describe("list "+prefix, obj.Err)
		}
		out = append(out, StoredObject{Key: obj.Key, Size: obj.Size, LastModified: obj.LastModified})
	}
	return out, nil
}

// Delete removes key.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	if err := s.core.Client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return s.describe("delete "+key, err)
	}
	return nil
}

// describe turns a store error into a sentence that names the cause a
// user can fix: the bucket, the credentials, the network.
func (s *S3Store) describe(op string, err error) error {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchBucket":
		return fmt.Errorf("%s: the bucket %q does not exist on %s: %w", op, s.bucket, s.where, err)
	case "NoSuchKey":
		return fmt.Errorf("%s: the object does not exist in the bucket %q on %s: %w", op, s.bucket, s.where, err)
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken",
		"XAdminUserNotFound": // versitygw's answer to an unknown access key
		return fmt.Errorf("%s: %s refused the credentials (%s): %w", op, s.where, resp.Code, err)
	}
	if resp.StatusCode == http.StatusForbidden {
		return fmt.Errorf("%s: %s refused the credentials or denied access (%s): %w", op, s.where, resp.Code, err)
	}
	var netErr net.Error
	var opErr *net.OpError
	if errors.As(err, &opErr) || (errors.As(err, &netErr) && netErr.Timeout()) || errors.Is(err, http.ErrHandlerTimeout) {
		return fmt.Errorf("%s: the store %s cannot be reached: %w", op, s.where, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Open reads the object under key. A key, bucket or credentials the store
// refuses is unusable: another attempt would be refused the same way.
func (s *S3Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	body, _, _, err := s.core.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		code := minio.ToErrorResponse(err).Code
		err = s.describe("read "+s.Location(key), err)
		if s3Unusable[code] {
			return nil, unusable(err)
		}
		return nil, err
	}
	return body, nil
}
