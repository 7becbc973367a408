package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc"

	"github.com/etcdhook/etcd-hook/agent/archive"
	"github.com/etcdhook/etcd-hook/agent/report"
)

// snapshot takes a full snapshot of history's cluster, names it by the
// revision its own database holds (a read taken before or after it could
// name it lower than what it holds: gardener's #1044), stores it, and then
// deletes what retention no longer keeps.
//
// The snapshot is spooled to a file first: its revision is known only once
// all of it has arrived, and the name must be given before the upload.
func (a *Archiver) snapshot(ctx context.Context, history string) (archive.Object, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, snapshotTimeout, fmt.Errorf("the snapshot took longer than %s", snapshotTimeout))
	defer cancel()
	member, err := pickMember(ctx, a.opts.Endpoints, a.opts.TLS)
	if err != nil {
		return archive.Object{}, err
	}
	if id, err := strconv.ParseUint(member.clusterID, 16, 64); err != nil || archive.HistoryID(id) != history {
		return archive.Object{}, fmt.Errorf("the endpoints now serve cluster %s, not %s", member.clusterID, history)
	}
	cli, err := newClient(member.endpoint, a.opts.TLS, grpc.WithInitialWindowSize(snapshotWindow), grpc.WithInitialConnWindowSize(snapshotWindow))
	if err != nil {
		return archive.Object{}, err
	}
	defer cli.Close()
	spool, err := os.CreateTemp(a.opts.SpoolDir, "snapshot-*.db")
	if err != nil {
		return archive.Object{}, fmt.Errorf("spooling the snapshot: %w", err)
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	stream, err := cli.Snapshot(ctx)
	if err != nil {
		return archive.Object{}, fmt.Errorf("snapshot of %s: %w", member.endpoint, err)
	}
	verified := newVerifyingReader(stream)
	_, err = io.Copy(spool, verified)
	stream.Close()
	if err != nil {
		return archive.Object{}, fmt.Errorf("snapshot of %s: %w", member.endpoint, err)
	}
	complete := a.now().UTC()
	info, err := readSnapshotDB(spool.Name(), verified.Size()-trailerSize)
	if err != nil {
		return archive.Object{}, fmt.Errorf("the snapshot of %s: %w", member.endpoint, err)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return archive.Object{}, err
	}

	enc := archive.Encoding{Compressed: a.opts.CompressSnapshots, Sealed: a.opts.Key != nil}
	name := archive.SnapshotName(info.Revision, complete, enc)
	var plain io.Reader = spool
	if enc.Compressed {
		z := compressed(spool)
		defer z.Close()
		plain = z
	}
	body, err := a.sealed(plain, name)
	if err != nil {
		return archive.Object{}, err
	}
	defer body.Close()
	key := archive.HistoryDir(a.opts.Base, history) + name
	meta := map[string]string{
		MetaRevision: strconv.FormatInt(info.Revision, 10), MetaVersion: member.version, MetaClusterID: history,
		MetaSHA256: verified.ObjectSHA256(),
	}
	if err := a.store.Put(ctx, key, body, meta); err != nil {
		return archive.Object{}, fmt.Errorf("storing the snapshot: %w", err)
	}
	a.log.Info("snapshot stored", "key", key, "revision", info.Revision, "size", verified.Size())
	a.update(func(s *report.ArchiveStatus) {
		s.LastSnapshotRevision, s.LastSnapshotTime, s.LastError = info.Revision, timePtr(complete), ""
	})
	if a.opts.MaxSnapshots > 0 {
		if err := a.prune(ctx, history); err != nil {
			a.failed("retention", err)
		}
	}
	return archive.Object{Key: key, Name: name, History: history, Kind: archive.KindSnapshot,
		From: info.Revision, To: info.Revision, First: complete, Last: complete, Encoding: enc}, nil
}

// snapshotTimeout bounds one snapshot, download and upload, as a one-shot
// backup's default timeout does.
const snapshotTimeout = 30 * time.Minute

// prune deletes what retention no longer keeps.
func (a *Archiver) prune(ctx context.Context, history string) error {
	hs, err := a.histories(ctx)
	if err != nil {
		return err
	}
	for _, o := range archive.Expired(hs, a.opts.MaxSnapshots, history) {
		if err := a.store.Delete(ctx, o.Key); err != nil {
			return err
		}
		a.log.Info("retention deleted", "key", o.Key)
	}
	return nil
}

// compressed is r through zstd, as the snapshot's object. Close it once
// done, as sealed's.
func compressed(r io.Reader) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		zw, err := zstd.NewWriter(pw, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(4<<20), zstd.WithEncoderCRC(true))
		if err == nil {
			if _, err = io.Copy(zw, r); err == nil {
				err = zw.Close()
			} else {
				zw.Close()
			}
		}
		pw.CloseWithError(err)
	}()
	return pr
}
