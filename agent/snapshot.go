package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
)

// ErrSnapshotIntegrity means a snapshot stream did not end with the sha256
// of its database: it was cut short or corrupted on the way. Such a
// snapshot is never stored.
var ErrSnapshotIntegrity = errors.New("snapshot failed its integrity check")

// trailerSize is the length of the sha256 etcd appends to a snapshot
// stream, computed over the database bytes before it.
const trailerSize = sha256.Size

// verifyingReader passes a snapshot stream through and, at its end, checks
// etcd's trailer: Read returns io.EOF only for a stream whose last 32 bytes
// are the sha256 of everything before them. It also hashes the whole
// stream, which is the stored object's checksum. Memory is constant: only
// the last 32 bytes are held back.
//
// Each byte is hashed once: the object's hash is the database's hash
// state, copied at the end, continued over the trailer. Hashing dominates
// the agent's CPU on a large snapshot.
type verifyingReader struct {
	r         io.Reader
	db        hash.Hash // the database: every byte but the trailer
	held      [trailerSize]byte
	nHeld     int
	size      int64
	dbSum     []byte
	objectSum []byte
}

func newVerifyingReader(r io.Reader) *verifyingReader {
	return &verifyingReader{r: r, db: sha256.New()}
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	if n > 0 {
		v.consume(p[:n])
	}
	if errors.Is(err, io.EOF) {
		if verr := v.verify(); verr != nil {
			return n, verr
		}
	}
	return n, err
}

// consume feeds the database hash with every byte that can no longer be
// part of the trailer, and holds back the last 32.
func (v *verifyingReader) consume(b []byte) {
	v.size += int64(len(b))
	if total := v.nHeld + len(b); total > trailerSize {
		release := total - trailerSize
		fromHeld := min(release, v.nHeld)
		v.db.Write(v.held[:fromHeld])
		v.db.Write(b[:release-fromHeld])
		rest := append(v.held[fromHeld:v.nHeld:v.nHeld], b[release-fromHeld:]...)
		v.nHeld = copy(v.held[:], rest)
		return
	}
	v.nHeld += copy(v.held[v.nHeld:], b)
}

func (v *verifyingReader) verify() error {
	if v.dbSum != nil {
		return nil
	}
	v.objectSum = v.finishObject()
	if v.nHeld < trailerSize {
		return fmt.Errorf("%w: the stream ended after %d bytes, before etcd's sha256 trailer", ErrSnapshotIntegrity, v.size)
	}
	sum := v.db.Sum(nil)
	if !bytes.Equal(sum, v.held[:]) {
		return fmt.Errorf("%w: the database's sha256 is %x, but etcd's trailer says %x", ErrSnapshotIntegrity, sum, v.held[:])
	}
	v.dbSum = sum
	return nil
}

// Size is how many bytes were read, trailer included.
func (v *verifyingReader) Size() int64 { return v.size }

// finishObject is the sha256 of every byte read so far: the database's
// hash continued, in a copy, over the bytes held back.
func (v *verifyingReader) finishObject() []byte {
	state, err := v.db.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic(err) // crypto/sha256 always marshals
	}
	object := sha256.New()
	if err := object.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		panic(err)
	}
	object.Write(v.held[:v.nHeld])
	return object.Sum(nil)
}

// ObjectSHA256 is the hex sha256 of the whole stream, as stored.
func (v *verifyingReader) ObjectSHA256() string {
	if v.objectSum == nil {
		return hex.EncodeToString(v.finishObject())
	}
	return hex.EncodeToString(v.objectSum)
}
