package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// withTrailer is a snapshot stream as etcd sends it.
func withTrailer(db []byte) []byte {
	sum := sha256.Sum256(db)
	return append(append([]byte(nil), db...), sum[:]...)
}

func TestVerifyingReader(t *testing.T) {
	db := bytes.Repeat([]byte("etcd bbolt page "), 5000)
	good := withTrailer(db)
	corrupt := bytes.Clone(good)
	corrupt[1000] ^= 0xff
	tests := []struct {
		name    string
		reason  string
		stream  []byte
		chunked bool
		wantErr bool
	}{
		{name: "whole", reason: "a stream with its trailer passes", stream: good},
		{name: "byte by byte", reason: "the trailer is found whatever the read sizes", stream: good, chunked: true},
		{name: "corrupt", reason: "a flipped byte fails the hash", stream: corrupt, wantErr: true},
		{name: "truncated", reason: "a stream cut short ends in the wrong 32 bytes (coreos/etcd-operator#1804 failed late on this)", stream: good[:len(good)-100], wantErr: true},
		{name: "shorter than the trailer", reason: "a stream of a few bytes has no trailer at all", stream: good[:10], wantErr: true},
		{name: "no trailer", reason: "the database without its trailer fails", stream: db, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tt.stream)
			if tt.chunked {
				r = iotest.OneByteReader(r)
			}
			v := newVerifyingReader(r)
			out, err := io.ReadAll(v)
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, ErrSnapshotIntegrity)) {
				t.Fatalf("%s: error %v, want error %v", tt.reason, err, tt.wantErr)
			}
			if !bytes.Equal(out, tt.stream) {
				t.Errorf("%s: the stream was not passed through unchanged", tt.reason)
			}
			if err != nil {
				return
			}
			sum := sha256.Sum256(tt.stream)
			if v.ObjectSHA256() != hex.EncodeToString(sum[:]) || v.Size() != int64(len(tt.stream)) {
				t.Errorf("object sha256 %s size %d, want %x and %d", v.ObjectSHA256(), v.Size(), sum, len(tt.stream))
			}
		})
	}
}

func FuzzVerifyingReader(f *testing.F) {
	f.Add([]byte("a small database"), uint8(7))
	f.Fuzz(func(t *testing.T, db []byte, chunk uint8) {
		stream := withTrailer(db)
		r := &chunkReader{b: stream, n: int(chunk%64) + 1}
		out, err := io.ReadAll(newVerifyingReader(r))
		if err != nil || !bytes.Equal(out, stream) {
			t.Fatalf("a valid stream of %d bytes read in chunks of %d: %v", len(stream), r.n, err)
		}
		if len(db) > 0 {
			bad := bytes.Clone(stream)
			bad[int(chunk)%len(bad)] ^= 1
			if _, err := io.ReadAll(newVerifyingReader(&chunkReader{b: bad, n: r.n})); !errors.Is(err, ErrSnapshotIntegrity) {
				t.Fatalf("a stream with one bit flipped passed: %v", err)
			}
		}
	})
}

type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[n:]
	return n, nil
}
