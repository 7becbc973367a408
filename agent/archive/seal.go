package archive

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Sealing encrypts an object client-side, before it reaches the store,
// with AES-256-GCM in authenticated chunks, so that a snapshot of many GiB
// is written and read in bounded memory (one chunk), and a reader learns
// of damage before it uses a byte of a damaged chunk.
//
// A sealed object, byte by byte (integers are big-endian):
//
//	header, 64 bytes, also the additional data of every chunk:
//	  [0:8)    magic "EHSEAL01"
//	  [8:40)   salt, 32 random bytes, fresh for every object
//	  [40:44)  chunk size: plaintext bytes per chunk, uint32, 1 KiB..16 MiB
//	  [44:64)  key check: HMAC-SHA256(check key, header[0:44]), first 20 bytes
//	chunk 0, chunk 1, …, the final chunk, and nothing after it:
//	  AES-256-GCM ciphertext of the chunk's plaintext, then its 16-byte tag
//
// Every chunk but the final one holds exactly chunk size plaintext bytes;
// the final one holds fewer (0 to chunk size - 1). So an object whose
// plaintext is a multiple of the chunk size, the empty one included, ends
// with an empty final chunk (16 bytes, only a tag): a full chunk is never
// final, and a reader that meets the end of the object right after one
// knows it was cut short.
//
// A chunk's 12-byte nonce is its index (0, 1, 2, …) as 8 bytes, three zero
// bytes, and a final flag byte, 1 for the final chunk and 0 for the
// others. The index makes a swapped, repeated or dropped chunk fail its
// tag; the flag makes an object cut at a chunk boundary fail, since the
// chunk it now ends with was not sealed as final.
//
// The keys are the object's own, derived from the 32-byte master key with
// HKDF-SHA256, salted with the header's salt:
//
//	data key  (AES-256): info "etcd-hook seal v1 data\x00"  + name
//	check key (HMAC):    info "etcd-hook seal v1 check\x00" + name
//
// The salt gives every object fresh keys, so GCM's nonces, counted from 0
// in each object, never repeat under one key. The name is the object's
// name within its chain (Object.Name): an object renamed to another's
// name, say an older delta put in a newer one's place, fails to open. The
// key check lets an opener tell a wrong key (or a renamed object) from
// damage before it reads a chunk; it says nothing about the key, being a
// MAC under a key derived from it. It also covers the salt and chunk size,
// so damage to the header reads as a wrong key: no reader can tell the two
// apart.

const (
	// DefaultChunkSize is the plaintext bytes per chunk NewSealer uses: big
	// enough that the 16-byte tags cost nothing, small enough to hold.
	DefaultChunkSize = 64 << 10
	// KeySize is the length of a master key: AES-256's.
	KeySize = 32
)

const (
	sealMagic      = "EHSEAL01"
	sealHeaderSize = 64
	sealSigned     = 44 // the header bytes the key check covers
	sealCheckSize  = sealHeaderSize - sealSigned
	sealTagSize    = 16
	sealMinChunk   = 1 << 10
	sealMaxChunk   = 16 << 20
	sealInfoData   = "etcd-hook seal v1 data\x00"
	sealInfoCheck  = "etcd-hook seal v1 check\x00"
)

// Why an object does not open. Every refusal wraps one of these, so a
// caller can tell them apart with errors.Is.
var (
	// ErrNotSealed: the object does not start with a sealed header (too
	// short, or not the magic). An object whose name says it is sealed
	// and that is not has been replaced: do not read it as plaintext.
	ErrNotSealed = errors.New("not a sealed object")
	// ErrWrongKey: the header's key check fails. The key is not the one
	// the object was sealed with, or the object was renamed, or its header
	// was damaged, which no reader can tell from the other two.
	ErrWrongKey = errors.New("wrong key (or the object was renamed, or its header damaged)")
	// ErrTampered: the header checks out but the chunks do not: one was
	// altered, moved, repeated or dropped, the object was cut short, or
	// bytes follow its final chunk.
	ErrTampered = errors.New("sealed object damaged or tampered with")
)

// sealKeys derives an object's AEAD and its header's key check from the
// master key, the object's name and header[0:44] (which holds the salt).
func sealKeys(key []byte, name string, header *[sealHeaderSize]byte) (cipher.AEAD, []byte, error) {
	if len(key) != KeySize {
		// The length only: a key is never printed.
		return nil, nil, fmt.Errorf("archive: a sealing key is %d bytes, not %d", len(key), KeySize)
	}
	salt := header[8:40]
	dataKey, err := hkdf.Key(sha256.New, key, salt, sealInfoData+name, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("archive: derive the data key: %w", err)
	}
	checkKey, err := hkdf.Key(sha256.New, key, salt, sealInfoCheck+name, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("archive: derive the check key: %w", err)
	}
	block, err := aes.NewCipher(dataKey)
	if err != nil {
		return nil, nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, nil, err
	}
	mac := hmac.New(sha256.New, checkKey)
	mac.Write(header[:sealSigned])
	return aead, mac.Sum(nil)[:sealCheckSize], nil
}

// sealNonce sets nonce to a chunk's: its index, three zero bytes, and the
// final flag.
func sealNonce(nonce *[12]byte, index uint64, final bool) {
	binary.BigEndian.PutUint64(nonce[:8], index)
	nonce[8], nonce[9], nonce[10], nonce[11] = 0, 0, 0, 0
	if final {
		nonce[11] = 1
	}
}

// sealOffset is where chunk index starts in a sealed object, for errors.
func sealOffset(index uint64, chunkSize int) uint64 {
	return sealHeaderSize + index*uint64(chunkSize+sealTagSize)
}

// NewSealer returns a WriteCloser that writes the sealed form of what is
// written to it into w, in chunks of DefaultChunkSize; see NewSealerSize.
func NewSealer(w io.Writer, key []byte, name string) (io.WriteCloser, error) {
	return NewSealerSize(w, key, name, DefaultChunkSize)
}

// NewSealerSize returns a WriteCloser that writes the sealed form of what
// is written to it into w, bound to name, in chunks of chunkSize plaintext
// bytes (1 KiB to 16 MiB). It writes the header to w at once; each chunk
// as it fills. Close writes the final chunk, without which the object does
// not open; it does not close w. After a failed write to w every call
// returns that error: the object is incomplete, and should be discarded.
func NewSealerSize(w io.Writer, key []byte, name string, chunkSize int) (io.WriteCloser, error) {
	s, err := newSealer(w, key, name, chunkSize, rand.Reader)
	if err != nil {
		return nil, err // not a nil *sealer in a non-nil interface
	}
	return s, nil
}

// newSealer is NewSealerSize with the salt read from salts, so that tests
// can seal the same object twice.
func newSealer(w io.Writer, key []byte, name string, chunkSize int, salts io.Reader) (*sealer, error) {
	if chunkSize < sealMinChunk || chunkSize > sealMaxChunk {
		return nil, fmt.Errorf("archive: chunk size %d is not between %d and %d", chunkSize, sealMinChunk, sealMaxChunk)
	}
	s := &sealer{w: w}
	copy(s.header[:], sealMagic)
	if _, err := io.ReadFull(salts, s.header[8:40]); err != nil {
		return nil, fmt.Errorf("archive: read a salt: %w", err)
	}
	binary.BigEndian.PutUint32(s.header[40:44], uint32(chunkSize))
	aead, check, err := sealKeys(key, name, &s.header)
	if err != nil {
		return nil, err
	}
	copy(s.header[sealSigned:], check)
	if _, err := w.Write(s.header[:]); err != nil {
		return nil, fmt.Errorf("archive: write the sealed header: %w", err)
	}
	s.aead = aead
	s.buf = make([]byte, 0, chunkSize+sealTagSize)
	return s, nil
}

// sealer is the WriteCloser NewSealerSize returns.
type sealer struct {
	w      io.Writer
	aead   cipher.AEAD
	header [sealHeaderSize]byte
	nonce  [12]byte // a field, not a local: the AEAD's interface makes it escape
	buf    []byte   // the chunk filling: plaintext, then sealed in place
	index  uint64   // of the chunk filling
	err    error    // the first failed write to w
	closed bool
}

func (s *sealer) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.closed {
		return 0, errors.New("archive: write to a closed sealer")
	}
	n := 0
	chunkSize := cap(s.buf) - sealTagSize
	for len(p) > 0 {
		k := copy(s.buf[len(s.buf):chunkSize], p)
		s.buf, p, n = s.buf[:len(s.buf)+k], p[k:], n+k
		// A full chunk is never the final one, so it goes out at once.
		if len(s.buf) == chunkSize {
			if err := s.flush(false); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Close writes the final chunk, which holds what is left: fewer bytes than
// a chunk, maybe none. Closing again does nothing.
func (s *sealer) Close() error {
	if s.err != nil || s.closed {
		return s.err
	}
	s.closed = true
	return s.flush(true)
}

// flush seals the buffered chunk in place and writes it to w.
func (s *sealer) flush(final bool) error {
	sealNonce(&s.nonce, s.index, final)
	sealed := s.aead.Seal(s.buf[:0], s.nonce[:], s.buf, s.header[:])
	if _, err := s.w.Write(sealed); err != nil {
		s.err = fmt.Errorf("archive: write sealed chunk %d: %w", s.index, err)
		return s.err
	}
	s.buf = s.buf[:0]
	s.index++
	return nil
}

// IsSealed reports whether prefix, the first bytes of an object, starts
// with a sealed header's magic. It needs 8 bytes; fewer are not sealed.
func IsSealed(prefix []byte) bool {
	return len(prefix) >= len(sealMagic) && string(prefix[:len(sealMagic)]) == sealMagic
}

// NewOpener returns a Reader of the plaintext of the sealed object r,
// which must have been sealed with key under name. It reads and checks
// the header at once, so a wrong key or a renamed object fails here, with
// ErrWrongKey, and an object that is not sealed with ErrNotSealed.
//
// The Reader returns each chunk's plaintext only after its tag verified,
// and io.EOF only after the final chunk verified and nothing followed it;
// any other refusal wraps ErrTampered. It holds one sealed chunk and reads
// one byte past it, to know whether the object ends there.
func NewOpener(r io.Reader, key []byte, name string) (io.Reader, error) {
	if len(key) != KeySize { // before reading, which cannot be undone
		return nil, fmt.Errorf("archive: a sealing key is %d bytes, not %d", len(key), KeySize)
	}
	o := &opener{r: r, name: name}
	n, err := io.ReadFull(r, o.header[:])
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("archive: open %q: read the header: %w", name, err)
	}
	if m := min(n, len(sealMagic)); string(o.header[:m]) != sealMagic[:m] {
		return nil, fmt.Errorf("archive: open %q: %w: it does not start with %q", name, ErrNotSealed, sealMagic)
	}
	if n < sealHeaderSize {
		return nil, fmt.Errorf("archive: open %q: %w: %d bytes, fewer than a %d-byte header", name, ErrNotSealed, n, sealHeaderSize)
	}
	aead, check, err := sealKeys(key, name, &o.header)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(check, o.header[sealSigned:]) {
		return nil, fmt.Errorf("archive: open %q: %w", name, ErrWrongKey)
	}
	// Checked after the key check, which covers it: only a holder of the
	// key could have written it, and nothing is allocated for it before.
	chunkSize := binary.BigEndian.Uint32(o.header[40:44])
	if chunkSize < sealMinChunk || chunkSize > sealMaxChunk {
		return nil, fmt.Errorf("archive: open %q: %w: chunk size %d is not between %d and %d", name, ErrTampered, chunkSize, sealMinChunk, sealMaxChunk)
	}
	o.aead = aead
	o.chunkSize = int(chunkSize)
	o.buf = make([]byte, int(chunkSize)+sealTagSize+1)
	return o, nil
}

// opener is the Reader NewOpener returns.
type opener struct {
	r         io.Reader
	name      string
	aead      cipher.AEAD
	header    [sealHeaderSize]byte
	nonce     [12]byte
	chunkSize int
	// buf holds a sealed chunk and, in its last byte, the first byte of
	// the next one if there is one (peeked); a verified chunk's plaintext
	// is opened in place.
	buf    []byte
	peeked bool
	out    []byte // verified plaintext not yet read, in buf
	index  uint64 // of the next chunk to read
	err    error  // io.EOF after the final chunk, or why the object failed
}

func (o *opener) Read(p []byte) (int, error) {
	for len(o.out) == 0 {
		if o.err != nil {
			return 0, o.err
		}
		o.err = o.next()
	}
	n := copy(p, o.out)
	o.out = o.out[n:]
	return n, nil
}

// next reads the next chunk, and sets out to its plaintext once it
// verified. It returns io.EOF with the final chunk.
func (o *opener) next() error {
	full := o.chunkSize + sealTagSize
	n := 0
	if o.peeked {
		o.buf[0], o.peeked, n = o.buf[full], false, 1
	}
	m, err := io.ReadFull(o.r, o.buf[n:])
	n += m
	switch {
	case err == nil:
		// A full chunk and a byte of the next: not the final one.
		o.peeked = true
		return o.open(o.buf[:full], false)
	case err != io.EOF && err != io.ErrUnexpectedEOF:
		return fmt.Errorf("archive: open %q: read chunk %d: %w", o.name, o.index, err)
	case n == full:
		// A full chunk, then the end: the final chunk, always shorter, is
		// missing. The chunk is checked, to say which is wrong, but its
		// plaintext is not given out: the object is known to be cut.
		if err := o.open(o.buf[:n], false); err != nil {
			return err
		}
		o.out = nil
		return fmt.Errorf("archive: open %q: %w: cut short after chunk %d", o.name, ErrTampered, o.index-1)
	case n == 0:
		// Only a full chunk is followed by a peeked byte, so this is the
		// first chunk.
		return fmt.Errorf("archive: open %q: %w: cut short after the header", o.name, ErrTampered)
	default:
		// Fewer bytes than a full chunk: this must be the final one.
		if err := o.open(o.buf[:n], true); err != nil {
			return err
		}
		return io.EOF
	}
}

// open verifies and decrypts sealed, the chunk at index, in place, and
// sets out to its plaintext. GCM clears the buffer if the tag fails, so
// no byte of a failing chunk is ever read.
func (o *opener) open(sealed []byte, final bool) error {
	sealNonce(&o.nonce, o.index, final)
	plain, err := o.aead.Open(sealed[:0], o.nonce[:], sealed, o.header[:])
	if err != nil {
		return fmt.Errorf("archive: open %q: %w: chunk %d at byte %d fails its tag",
			o.name, ErrTampered, o.index, sealOffset(o.index, o.chunkSize))
	}
	o.out = plain
	o.index++
	return nil
}
