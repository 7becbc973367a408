package archive

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"
)

// EventType is what an event did to its key.
type EventType uint8

const (
	Put    EventType = 1
	Delete EventType = 2
)

// Event is one change, as etcd's watch reported it. The revision it was
// made at is its Revision's; a delete carries the key alone.
type Event struct {
	Type           EventType
	Key, Value     []byte
	CreateRevision int64
	Version        int64
	Lease          int64
}

// Revision is every event etcd made at one revision (a transaction makes
// several), and when the archiver received them: no later than that,
// the revision was committed.
type Revision struct {
	Revision int64
	Received time.Time
	Events   []Event
}

// Lease is a lease that an event attached a key to, with the TTL it was
// granted: the watch does not carry it, so the archiver asks etcd.
type Lease struct {
	ID  int64
	TTL int64
}

// KVHash is etcd's HashKV of the live cluster at a revision, which a
// restore that reaches that revision compares its own with.
type KVHash struct {
	Revision        int64
	CompactRevision int64
	Hash            uint32
}

// Delta is the revisions From to To of one history, every one of them.
type Delta struct {
	History   string
	From, To  int64
	Revisions []Revision
	Leases    []Lease
	Hash      *KVHash
}

// deltaMagic starts every delta before compression; the format version is
// its last byte.
var deltaMagic = []byte("EHDELTA1")

// Record tags. A delta is its magic, then one zstd frame of records, each
// a tag byte and its fields: uvarints for lengths and counts, varints for
// numbers, raw bytes for keys and values.
//
//	'H' history (len, bytes), from, to
//	'R' revision, received (unix ns), event count, then per event:
//	    type (byte), key (len, bytes), value (len, bytes), create revision, version, lease
//	'L' lease id, ttl
//	'K' hash revision, compact revision, hash
//	'E' revision count, event count, sha256 of every record before it
//
// 'H' comes first and 'E' last; revisions run from From to To, each once.
const (
	tagHeader   = 'H'
	tagRevision = 'R'
	tagLease    = 'L'
	tagHash     = 'K'
	tagEnd      = 'E'
)

// MaxDeltaBytes bounds a delta's records once decompressed: the archiver
// cuts a delta long before it, and a decoder never holds more.
const MaxDeltaBytes = 256 << 20

// ErrBadDelta is a delta that does not decode as the archiver wrote it:
// cut short, corrupted, or not a delta.
var ErrBadDelta = errors.New("not a valid delta")

// Validate checks what decoding checks, before anything is written.
func (d *Delta) Validate() error {
	if !validHistory(d.History) {
		return fmt.Errorf("%w: history %q is not a cluster ID", ErrBadDelta, d.History)
	}
	if d.From < 1 || d.To < d.From {
		return fmt.Errorf("%w: revisions %d to %d", ErrBadDelta, d.From, d.To)
	}
	if int64(len(d.Revisions)) != d.To-d.From+1 {
		return fmt.Errorf("%w: revisions %d to %d, but %d of them", ErrBadDelta, d.From, d.To, len(d.Revisions))
	}
	for i, r := range d.Revisions {
		if r.Revision != d.From+int64(i) {
			return fmt.Errorf("%w: revision %d where %d belongs", ErrBadDelta, r.Revision, d.From+int64(i))
		}
		if len(r.Events) == 0 {
			return fmt.Errorf("%w: revision %d has no event (every etcd revision changes a key)", ErrBadDelta, r.Revision)
		}
		for _, e := range r.Events {
			if e.Type != Put && e.Type != Delete || len(e.Key) == 0 {
				return fmt.Errorf("%w: revision %d has an event of type %d on key %q", ErrBadDelta, r.Revision, e.Type, e.Key)
			}
		}
	}
	return nil
}

// EncodeDelta writes d, compressed, to w.
func EncodeDelta(w io.Writer, d *Delta) error {
	if err := d.Validate(); err != nil {
		return err
	}
	if _, err := w.Write(deltaMagic); err != nil {
		return err
	}
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(true),
		zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
	if err != nil {
		return err
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(zw, h), 64<<10)
	e := &recordWriter{w: bw}
	e.tag(tagHeader).bytes([]byte(d.History)).int(d.From).int(d.To)
	events := 0
	for _, r := range d.Revisions {
		e.tag(tagRevision).int(r.Revision).int(r.Received.UnixNano()).uint(uint64(len(r.Events)))
		for _, ev := range r.Events {
			e.byte(byte(ev.Type)).bytes(ev.Key).bytes(ev.Value).int(ev.CreateRevision).int(ev.Version).int(ev.Lease)
		}
		events += len(r.Events)
	}
	for _, l := range d.Leases {
		e.tag(tagLease).int(l.ID).int(l.TTL)
	}
	if d.Hash != nil {
		e.tag(tagHash).int(d.Hash.Revision).int(d.Hash.CompactRevision).uint(uint64(d.Hash.Hash))
	}
	if e.err != nil {
		return e.err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	sum := h.Sum(nil)
	end := &recordWriter{w: zw}
	end.tag(tagEnd).uint(uint64(len(d.Revisions))).uint(uint64(events))
	if end.err == nil {
		_, end.err = zw.Write(sum)
	}
	if end.err != nil {
		zw.Close()
		return end.err
	}
	return zw.Close()
}

type recordWriter struct {
	w   io.Writer
	buf [binary.MaxVarintLen64]byte
	err error
}

func (e *recordWriter) write(p []byte) *recordWriter {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
	return e
}

func (e *recordWriter) tag(t byte) *recordWriter  { return e.byte(t) }
func (e *recordWriter) byte(b byte) *recordWriter { return e.write([]byte{b}) }
func (e *recordWriter) int(v int64) *recordWriter {
	return e.write(e.buf[:binary.PutVarint(e.buf[:], v)])
}
func (e *recordWriter) uint(v uint64) *recordWriter {
	return e.write(e.buf[:binary.PutUvarint(e.buf[:], v)])
}
func (e *recordWriter) bytes(b []byte) *recordWriter { return e.uint(uint64(len(b))).write(b) }
