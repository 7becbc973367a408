package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

var (
	testKey  = bytes.Repeat([]byte{0x5a}, KeySize)
	otherKey = bytes.Repeat([]byte{0xa5}, KeySize)
)

const testName = "delta-00000000000000000101-00000000000000000200.zst.sealed"

// testPlain is n bytes of a pseudo-random plaintext, the same for a seed.
func testPlain(n int, seed uint64) []byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	b := make([]byte, n)
	rand.NewChaCha8(s).Read(b)
	return b
}

// testSeal seals plain with testKey under name, writing it in pieces of
// piece bytes (all at once if piece is 0).
func testSeal(t testing.TB, plain []byte, name string, chunkSize, piece int) []byte {
	t.Helper()
	var buf bytes.Buffer
	s, err := NewSealerSize(&buf, testKey, name, chunkSize)
	if err != nil {
		t.Fatal(err)
	}
	if piece == 0 {
		piece = max(len(plain), 1)
	}
	for p := plain; len(p) > 0; {
		k := min(piece, len(p))
		if n, err := s.Write(p[:k]); n != k || err != nil {
			t.Fatalf("Write of %d bytes: %d, %v", k, n, err)
		}
		p = p[k:]
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testOpen opens sealed and reads it to the end, returning what it read
// before the error, if any.
func testOpen(r io.Reader, key []byte, name string) ([]byte, error) {
	o, err := NewOpener(r, key, name)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(o)
}

// sealedLen is the length of a sealed object: its header, its chunks, and
// an empty final chunk when the plaintext fills its last chunk.
func sealedLen(plain, chunkSize int) int {
	return sealHeaderSize + plain + (plain/chunkSize+1)*sealTagSize
}

// TestSealRoundTrip: what is sealed opens to the same bytes, at every
// boundary of the chunking, however it is written and read.
func TestSealRoundTrip(t *testing.T) {
	for _, chunk := range []int{sealMinChunk, DefaultChunkSize} {
		for _, tc := range []struct {
			reason string
			size   int
		}{
			{"empty: one empty final chunk", 0},
			{"one byte", 1},
			{"a byte short of a chunk: one nearly full final chunk", chunk - 1},
			{"a chunk: a full chunk, then an empty final one", chunk},
			{"a byte past a chunk", chunk + 1},
			{"three chunks: three full ones, then an empty final one", 3 * chunk},
			{"three chunks and five bytes", 3*chunk + 5},
		} {
			plain := testPlain(tc.size, uint64(tc.size))
			for _, piece := range []int{0, 7, 1000} {
				t.Run(fmt.Sprintf("chunk=%d/size=%d/write=%d", chunk, tc.size, piece), func(t *testing.T) {
					sealed := testSeal(t, plain, testName, chunk, piece)
					if diff := cmp.Diff(sealedLen(tc.size, chunk), len(sealed)); diff != "" {
						t.Errorf("%s: sealed length (-want +got):\n%s", tc.reason, diff)
					}
					readers := map[string]io.Reader{
						"whole":    bytes.NewReader(sealed),
						"one byte": iotest.OneByteReader(bytes.NewReader(sealed)),
						"half":     iotest.HalfReader(bytes.NewReader(sealed)),
						"data+EOF": iotest.DataErrReader(bytes.NewReader(sealed)),
					}
					for how, r := range readers {
						got, err := testOpen(r, testKey, testName)
						if err != nil || !bytes.Equal(got, plain) {
							t.Errorf("%s: reading %s: %d of %d bytes back, error %v", tc.reason, how, len(got), len(plain), err)
						}
					}
					o, err := NewOpener(bytes.NewReader(sealed), testKey, testName)
					if err != nil {
						t.Fatal(err)
					}
					if err := iotest.TestReader(o, plain); err != nil {
						t.Errorf("%s: %v", tc.reason, err)
					}
				})
			}
		}
	}
}

// TestSealLargeStream: 10 MiB through io.Copy both ways.
func TestSealLargeStream(t *testing.T) {
	const size = 10 << 20
	var sealed bytes.Buffer
	s, err := NewSealer(&sealed, testKey, testName)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	if _, err := io.Copy(s, io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{7}), size), want)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o, err := NewOpener(&sealed, testKey, testName)
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	if n, err := io.Copy(got, o); n != size || err != nil {
		t.Fatalf("opened %d bytes of %d: %v", n, size, err)
	}
	if diff := cmp.Diff(want.Sum(nil), got.Sum(nil)); diff != "" {
		t.Errorf("sha256 (-want +got):\n%s", diff)
	}
}

// TestOpenRefuses: every way an object can be wrong fails with its
// sentinel, having given out only the plaintext of the chunks before the
// one that failed.
func TestOpenRefuses(t *testing.T) {
	const c = sealMinChunk
	const full = c + sealTagSize
	at := func(i int) int { return sealHeaderSize + i*full } // where chunk i starts
	plain := testPlain(3*c+5, 1)
	sealed := testSeal(t, plain, testName, c, 0) // chunks 0-2 full, 3 final with 5 bytes
	even := testPlain(3*c, 2)
	sealedEven := testSeal(t, even, testName, c, 0) // chunks 0-2 full, 3 final and empty
	again := testSeal(t, plain, testName, c, 0)     // the same object, another salt

	flip := func(b []byte, off int, bit byte) []byte {
		b = bytes.Clone(b)
		b[off] ^= bit
		return b
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	snapshot := make([]byte, 4096) // a bbolt file's first page, as etcd writes it
	copy(snapshot[16:], []byte{0xed, 0xda, 0x0c, 0xed, 2, 0, 0, 0, 0, 0x10, 0, 0})

	type tc struct {
		reason string
		input  []byte
		key    []byte
		name   string
		plain  []byte // what was sealed, of which the case may read...
		read   int    // ...this many bytes, the chunks before the bad one
		want   error
		msg    string // in the error
	}
	cases := []tc{
		{reason: "wrong key", key: otherKey, want: ErrWrongKey},
		{reason: "renamed: sealed as another object", name: "delta-00000000000000000201-00000000000000000300.zst.sealed", want: ErrWrongKey},
		{reason: "magic damaged", input: flip(sealed, 3, 1), want: ErrNotSealed, msg: `does not start with "EHSEAL01"`},
		{reason: "the header of another seal of the same object", input: cat(again[:sealHeaderSize], sealed[sealHeaderSize:]), want: ErrTampered, msg: "chunk 0 at byte 64"},
		{reason: "chunk 1 from another seal of the same object", input: cat(sealed[:at(1)], again[at(1):at(2)], sealed[at(2):]), read: c, want: ErrTampered, msg: "chunk 1 at byte 1104"},
		{reason: "chunks 1 and 2 swapped", input: cat(sealed[:at(1)], sealed[at(2):at(3)], sealed[at(1):at(2)], sealed[at(3):]), read: c, want: ErrTampered, msg: "chunk 1 at byte"},
		{reason: "chunks 0 and 1 swapped", input: cat(sealed[:at(0)], sealed[at(1):at(2)], sealed[at(0):at(1)], sealed[at(2):]), want: ErrTampered, msg: "chunk 0 at byte"},
		{reason: "chunk 1 repeated", input: cat(sealed[:at(2)], sealed[at(1):]), read: 2 * c, want: ErrTampered, msg: "chunk 2 at byte"},
		{reason: "the final chunk repeated", input: cat(sealed, sealed[at(3):]), read: 3 * c, want: ErrTampered, msg: "chunk 3 at byte"},
		{reason: "only the header: cut short before chunk 0", input: sealed[:sealHeaderSize], want: ErrTampered, msg: "cut short after the header"},
		{reason: "cut at a chunk boundary: chunk 1 verifies but is not given out", input: sealed[:at(2)], read: c, want: ErrTampered, msg: "cut short after chunk 1"},
		{reason: "cut in chunk 2", input: sealed[:at(2)+100], read: 2 * c, want: ErrTampered, msg: "chunk 2 at byte"},
		{reason: "cut in chunk 2's tag", input: sealed[:at(3)-1], read: 2 * c, want: ErrTampered, msg: "chunk 2 at byte"},
		{reason: "cut in the final chunk", input: sealed[:len(sealed)-3], read: 3 * c, want: ErrTampered, msg: "chunk 3 at byte"},
		{reason: "cut to less than a tag of the final chunk", input: sealed[:at(3)+5], read: 3 * c, want: ErrTampered, msg: "chunk 3 at byte"},
		{reason: "the final chunk removed", input: sealed[:at(3)], read: 2 * c, want: ErrTampered, msg: "cut short after chunk 2"},
		{reason: "the empty final chunk removed", input: sealedEven[:at(3)], plain: even, read: 2 * c, want: ErrTampered, msg: "cut short after chunk 2"},
		{reason: "a byte after the final chunk", input: cat(sealed, []byte{0}), read: 3 * c, want: ErrTampered, msg: "chunk 3 at byte"},
		{reason: "a byte after the empty final chunk", input: cat(sealedEven, []byte{0}), plain: even, read: 3 * c, want: ErrTampered, msg: "chunk 3 at byte"},
		{reason: "bytes after the final chunk, up to a full chunk", input: cat(sealed, make([]byte, full-21)), read: 3 * c, want: ErrTampered, msg: "chunk 3 at byte"},
		{reason: "a sealed object after the final chunk", input: cat(sealed, again), read: 3 * c, want: ErrTampered, msg: "chunk 3 at byte"},
		{reason: "empty", input: []byte{}, want: ErrNotSealed, msg: "0 bytes"},
		{reason: "only the magic", input: []byte(sealMagic), want: ErrNotSealed, msg: "8 bytes, fewer than a 64-byte header"},
		{reason: "half a header", input: sealed[:40], want: ErrNotSealed, msg: "40 bytes"},
		{reason: "an etcd snapshot, not sealed", input: snapshot, want: ErrNotSealed},
		{reason: "JSON, not sealed", input: []byte(`{"revision": 200, "sha256": "e3b0c442"}`), want: ErrNotSealed},
		{reason: "a zstd frame, not sealed", input: []byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0x58, 0x11, 0}, want: ErrNotSealed},
	}
	// Any bit of the header but the magic reads as a wrong key: the key
	// check covers the salt and chunk size, and is itself checked.
	for _, f := range []struct {
		what string
		off  int
		bit  byte
	}{
		{"salt's first byte", 8, 1}, {"salt's last byte", 39, 0x80},
		{"chunk size, to 0", 42, 0x04}, {"chunk size, to 1025", 43, 1}, {"chunk size, to 2 GiB", 40, 0x80},
		{"key check's first byte", 44, 1}, {"key check's last byte", 63, 0x40},
	} {
		cases = append(cases, tc{reason: "header: a bit of the " + f.what, input: flip(sealed, f.off, f.bit), want: ErrWrongKey})
	}
	// A bit of any chunk's ciphertext or tag fails that chunk.
	for i := range 4 {
		last := at(i+1) - 1
		if i == 3 {
			last = len(sealed) - 1
		}
		msg := fmt.Sprintf("chunk %d at byte %d", i, at(i))
		cases = append(cases,
			tc{reason: fmt.Sprintf("chunk %d: a bit of its ciphertext", i), input: flip(sealed, at(i), 1), read: i * c, want: ErrTampered, msg: msg},
			tc{reason: fmt.Sprintf("chunk %d: a bit of its tag", i), input: flip(sealed, last, 0x10), read: i * c, want: ErrTampered, msg: msg},
		)
	}
	cases = append(cases, tc{reason: "the empty final chunk: a bit of its tag", input: flip(sealedEven, len(sealedEven)-1, 2), plain: even, read: 3 * c, want: ErrTampered, msg: "chunk 3 at byte"})

	for _, tc := range cases {
		if tc.input == nil {
			tc.input = sealed
		}
		if tc.key == nil {
			tc.key = testKey
		}
		if tc.name == "" {
			tc.name = testName
		}
		if tc.plain == nil {
			tc.plain = plain
		}
		got, err := testOpen(bytes.NewReader(tc.input), tc.key, tc.name)
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.msg) {
			t.Errorf("%s: error %v, want %v with %q", tc.reason, err, tc.want, tc.msg)
		}
		if diff := cmp.Diff(tc.read, len(got)); diff != "" {
			t.Errorf("%s: plaintext bytes read (-want +got):\n%s", tc.reason, diff)
		} else if !bytes.Equal(got, tc.plain[:tc.read]) {
			t.Errorf("%s: the plaintext read is not the sealed one", tc.reason)
		}
	}
}

// TestSealArguments: a key of the wrong length or a chunk size out of range
// is refused, saying how long the key was but never what it holds, and an
// opener refuses before it reads.
func TestSealArguments(t *testing.T) {
	for _, key := range [][]byte{nil, bytes.Repeat([]byte{'K'}, 16), bytes.Repeat([]byte{'K'}, 33)} {
		want := fmt.Sprintf("a sealing key is %d bytes, not 32", len(key))
		if _, err := NewSealer(io.Discard, key, testName); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "KK") {
			t.Errorf("NewSealer with a %d-byte key: %v, want %q", len(key), err, want)
		}
		r := bytes.NewReader(testSeal(t, nil, testName, DefaultChunkSize, 0))
		if _, err := NewOpener(r, key, testName); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewOpener with a %d-byte key: %v, want %q", len(key), err, want)
		}
		if r.Len() != sealedLen(0, DefaultChunkSize) {
			t.Errorf("NewOpener with a %d-byte key read %d bytes", len(key), sealedLen(0, DefaultChunkSize)-r.Len())
		}
	}
	for _, tc := range []struct {
		reason string
		size   int
		ok     bool
	}{
		{"zero", 0, false},
		{"a byte short of 1 KiB", sealMinChunk - 1, false},
		{"1 KiB", sealMinChunk, true},
		{"16 MiB", sealMaxChunk, true},
		{"a byte past 16 MiB", sealMaxChunk + 1, false},
	} {
		s, err := NewSealerSize(io.Discard, testKey, testName, tc.size)
		if diff := cmp.Diff(tc.ok, err == nil); diff != "" {
			t.Errorf("%s: NewSealerSize(%d) = %v, %v; ok (-want +got):\n%s", tc.reason, tc.size, s, err, diff)
		}
		if !tc.ok && s != nil {
			t.Errorf("%s: NewSealerSize returned a sealer, %v, with its error", tc.reason, s)
		}
	}
}

// failingWriter takes n bytes, then fails.
type failingWriter struct{ n int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return 0, errDiskFull
	}
	w.n -= len(p)
	return len(p), nil
}

// TestSealerLifecycle: a failed write is sticky and reaches Close; a
// second Close writes nothing; a write after Close fails.
func TestSealerLifecycle(t *testing.T) {
	s, err := NewSealerSize(&failingWriter{n: sealHeaderSize}, testKey, testName, sealMinChunk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(make([]byte, sealMinChunk)); !errors.Is(err, errDiskFull) {
		t.Errorf("Write of a chunk to a full disk: %v", err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, errDiskFull) {
		t.Errorf("Write after a failed one: %v", err)
	}
	if err := s.Close(); !errors.Is(err, errDiskFull) {
		t.Errorf("Close after a failed write: %v", err)
	}

	var buf bytes.Buffer
	s, err = NewSealer(&buf, testKey, testName)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	n := buf.Len()
	if err := s.Close(); err != nil || buf.Len() != n {
		t.Errorf("second Close: %v, wrote %d bytes", err, buf.Len()-n)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Error("Write after Close succeeded")
	}
}

// TestSealHidesAndSalts: the same plaintext sealed twice with the same key
// and name gives two different objects, neither holding the plaintext.
func TestSealHidesAndSalts(t *testing.T) {
	const phrase = "the etcd-hook secret value "
	plain := []byte(strings.Repeat(phrase, 1000))
	a := testSeal(t, plain, testName, sealMinChunk, 0)
	b := testSeal(t, plain, testName, sealMinChunk, 0)
	if bytes.Equal(a, b) || bytes.Equal(a[8:40], b[8:40]) {
		t.Error("two seals are alike, or have the same salt")
	}
	for _, sealed := range [][]byte{a, b} {
		if !IsSealed(sealed) {
			t.Error("IsSealed of a sealed object is false")
		}
		if bytes.Contains(sealed, []byte("secret")) {
			t.Error("a sealed object holds the plaintext")
		}
	}
	for _, prefix := range []string{"", "EHSEAL0", "EHSEAL02", "{}"} {
		if IsSealed([]byte(prefix)) {
			t.Errorf("IsSealed(%q) is true", prefix)
		}
	}
}

// TestOpenMemoryBound: opening 64 MiB allocates about one chunk, not the
// object.
func TestOpenMemoryBound(t *testing.T) {
	const size = 64 << 20
	var sealed bytes.Buffer
	sealed.Grow(sealedLen(size, DefaultChunkSize))
	s, err := NewSealer(&sealed, testKey, testName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(s, io.LimitReader(rand.NewChaCha8([32]byte{9}), size)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	o, err := NewOpener(bytes.NewReader(sealed.Bytes()), testKey, testName)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, o)
	runtime.ReadMemStats(&after)
	if n != size || err != nil {
		t.Fatalf("opened %d bytes of %d: %v", n, size, err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("opening %d MiB allocated %d bytes", size>>20, alloc)
	if alloc > 1<<20 {
		t.Errorf("opening %d MiB allocated %d bytes, want under 1 MiB", size>>20, alloc)
	}
}

// FuzzOpen: whatever the bytes, opening them does not panic, and either
// gives back a seed's plaintext unchanged, or fails with a sentinel after
// giving out only a prefix of one.
func FuzzOpen(f *testing.F) {
	seeds := map[string][]byte{} // sealed -> plaintext
	for i, size := range []int{0, 1, sealMinChunk - 1, sealMinChunk, 2*sealMinChunk + 500} {
		plain := testPlain(size, uint64(100+i))
		var buf bytes.Buffer
		// A salt of its own for each, so that chunks cannot be spliced
		// between seeds, as they could not between real objects.
		s, err := newSealer(&buf, testKey, testName, sealMinChunk, bytes.NewReader(bytes.Repeat([]byte{byte(i)}, 32)))
		if err != nil {
			f.Fatal(err)
		}
		s.Write(plain)
		if err := s.Close(); err != nil {
			f.Fatal(err)
		}
		seeds[buf.String()] = plain
		f.Add(buf.Bytes())
	}
	f.Add([]byte(`{"revision": 1}`))
	f.Fuzz(func(t *testing.T, input []byte) {
		got, err := testOpen(bytes.NewReader(input), testKey, testName)
		if err == nil {
			want, ok := seeds[string(input)]
			if !ok {
				t.Fatalf("an altered object opened, to %d bytes", len(got))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("a seed opened to other plaintext")
			}
			return
		}
		if !errors.Is(err, ErrNotSealed) && !errors.Is(err, ErrWrongKey) && !errors.Is(err, ErrTampered) {
			t.Fatalf("error without a sentinel: %v", err)
		}
		for _, plain := range seeds {
			if bytes.HasPrefix(plain, got) {
				return
			}
		}
		t.Fatalf("a failed open gave out %d bytes that are no seed's", len(got))
	})
}

func benchPlain() []byte { return testPlain(8<<20, 3) }

func BenchmarkSeal(b *testing.B) {
	plain := benchPlain()
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		s, err := NewSealer(io.Discard, testKey, testName)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Write(plain); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	plain := benchPlain()
	sealed := testSeal(b, plain, testName, DefaultChunkSize, 0)
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		o, err := NewOpener(bytes.NewReader(sealed), testKey, testName)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, o); err != nil {
			b.Fatal(err)
		}
	}
}
