package archive

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"
)

// DecodeDelta reads a delta EncodeDelta wrote, and checks it whole: a
// delta cut short, with a revision missing or out of order, or with any
// byte changed fails with ErrBadDelta, so that nothing of it is replayed.
func DecodeDelta(r io.Reader) (*Delta, error) {
	magic := make([]byte, len(deltaMagic))
	if _, err := io.ReadFull(r, magic); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		// The object's own reader failed (a sealed chunk that does not
		// open, say): its reason, not this one's.
		return nil, fmt.Errorf("%w: %w", ErrBadDelta, err)
	} else if err != nil || !bytes.Equal(magic, deltaMagic) {
		return nil, fmt.Errorf("%w: it does not start as a delta", ErrBadDelta)
	}
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxDeltaBytes))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	h := sha256.New()
	d := &recordReader{r: bufio.NewReaderSize(io.LimitReader(zr, MaxDeltaBytes), 64<<10), h: h}
	delta, err := d.delta()
	if err != nil {
		switch {
		case errors.Is(err, ErrBadDelta):
			return nil, err
		case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
			return nil, fmt.Errorf("%w: cut short", ErrBadDelta)
		}
		return nil, fmt.Errorf("%w: %w", ErrBadDelta, err)
	}
	return delta, nil
}

type recordReader struct {
	r *bufio.Reader
	// h hashes every byte read until the end record.
	h      hash.Hash
	hashed bool
}

func (d *recordReader) byte() (byte, error) {
	b, err := d.r.ReadByte()
	if err == nil && !d.hashed {
		d.h.Write([]byte{b})
	}
	return b, err
}

func (d *recordReader) ReadByte() (byte, error) { return d.byte() }

func (d *recordReader) int() (int64, error)   { return binary.ReadVarint(d) }
func (d *recordReader) uint() (uint64, error) { return binary.ReadUvarint(d) }

func (d *recordReader) bytes() ([]byte, error) {
	n, err := d.uint()
	if err != nil {
		return nil, err
	}
	if n > MaxDeltaBytes {
		return nil, fmt.Errorf("%w: a field of %d bytes", ErrBadDelta, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		return nil, err
	}
	if !d.hashed {
		d.h.Write(b)
	}
	return b, nil
}

func (d *recordReader) delta() (*Delta, error) {
	out := &Delta{}
	if t, err := d.byte(); err != nil || t != tagHeader {
		return nil, fmt.Errorf("%w: no header", ErrBadDelta)
	}
	history, err := d.bytes()
	if err != nil {
		return nil, err
	}
	out.History = string(history)
	if out.From, err = d.int(); err != nil {
		return nil, err
	}
	if out.To, err = d.int(); err != nil {
		return nil, err
	}
	events := uint64(0)
	for {
		// The tag is hashed with its record, unless it ends the delta.
		t, err := d.r.ReadByte()
		if err != nil {
			return nil, err
		}
		if t != tagEnd {
			d.h.Write([]byte{t})
		}
		switch t {
		case tagRevision:
			r, err := d.revision()
			if err != nil {
				return nil, err
			}
			out.Revisions = append(out.Revisions, r)
			events += uint64(len(r.Events))
		case tagLease:
			var l Lease
			if l.ID, err = d.int(); err == nil {
				l.TTL, err = d.int()
			}
			if err != nil {
				return nil, err
			}
			out.Leases = append(out.Leases, l)
		case tagHash:
			var k KVHash
			var hash uint64
			if k.Revision, err = d.int(); err == nil {
				if k.CompactRevision, err = d.int(); err == nil {
					hash, err = d.uint()
				}
			}
			if err != nil {
				return nil, err
			}
			k.Hash = uint32(hash)
			out.Hash = &k
		case tagEnd:
			d.hashed = true
			return out, d.end(out, events, d.h.Sum(nil))
		default:
			return nil, fmt.Errorf("%w: unknown record %q", ErrBadDelta, t)
		}
	}
}

func (d *recordReader) revision() (Revision, error) {
	var r Revision
	rev, err := d.int()
	if err != nil {
		return r, err
	}
	ns, err := d.int()
	if err != nil {
		return r, err
	}
	n, err := d.uint()
	if err != nil {
		return r, err
	}
	if n > MaxDeltaBytes/8 {
		return r, fmt.Errorf("%w: revision %d claims %d events", ErrBadDelta, rev, n)
	}
	r = Revision{Revision: rev, Received: time.Unix(0, ns).UTC(), Events: make([]Event, 0, n)}
	for range n {
		var e Event
		t, err := d.byte()
		if err != nil {
			return r, err
		}
		e.Type = EventType(t)
		if e.Key, err = d.bytes(); err != nil {
			return r, err
		}
		if e.Value, err = d.bytes(); err != nil {
			return r, err
		}
		if e.CreateRevision, err = d.int(); err != nil {
			return r, err
		}
		if e.Version, err = d.int(); err != nil {
			return r, err
		}
		if e.Lease, err = d.int(); err != nil {
			return r, err
		}
		r.Events = append(r.Events, e)
	}
	return r, nil
}

// end checks the end record against what was read, and that nothing
// follows it.
func (d *recordReader) end(out *Delta, events uint64, sum []byte) error {
	revs, err := d.uint()
	if err != nil {
		return err
	}
	n, err := d.uint()
	if err != nil {
		return err
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(d.r, want); err != nil {
		return err
	}
	switch {
	case revs != uint64(len(out.Revisions)) || n != events:
		return fmt.Errorf("%w: it ends saying %d revisions and %d events, and holds %d and %d", ErrBadDelta, revs, n, len(out.Revisions), events)
	case !bytes.Equal(want, sum):
		return fmt.Errorf("%w: its records do not match their checksum", ErrBadDelta)
	}
	if _, err := d.r.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: bytes follow its end", ErrBadDelta)
	}
	return out.Validate()
}
