package archive

import (
	"bytes"
	"errors"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/klauspost/compress/zstd"
)

func sampleDelta() *Delta {
	return &Delta{
		History: testHistory, From: 101, To: 103,
		Revisions: []Revision{
			{Revision: 101, Received: at(1), Events: []Event{{Type: Put, Key: []byte("/a"), Value: []byte("1"), CreateRevision: 101, Version: 1}}},
			{Revision: 102, Received: at(1), Events: []Event{
				// A transaction: several events at one revision.
				{Type: Put, Key: []byte("/a"), Value: []byte("2"), CreateRevision: 101, Version: 2},
				{Type: Put, Key: []byte("/lease/x"), Value: []byte{}, CreateRevision: 102, Version: 1, Lease: 0x1234},
			}},
			{Revision: 103, Received: at(2), Events: []Event{{Type: Delete, Key: []byte("/a")}}},
		},
		Leases: []Lease{{ID: 0x1234, TTL: 30}},
		Hash:   &KVHash{Revision: 103, CompactRevision: 50, Hash: 0xdeadbeef},
	}
}

func encoded(t *testing.T, d *Delta) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := EncodeDelta(&b, d); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestDeltaRoundTrip(t *testing.T) {
	want := sampleDelta()
	got, err := DecodeDelta(bytes.NewReader(encoded(t, want)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
}

func TestDeltaRefused(t *testing.T) {
	edit := func(f func(*Delta)) *Delta { d := sampleDelta(); f(d); return d }
	cases := []struct {
		name, reason string
		d            *Delta
	}{
		{"revision missing", "every revision from From to To, each once", edit(func(d *Delta) { d.Revisions = append(d.Revisions[:1], d.Revisions[2:]...) })},
		{"out of order", "revisions in order", edit(func(d *Delta) { d.Revisions[1], d.Revisions[2] = d.Revisions[2], d.Revisions[1] })},
		{"empty revision", "every etcd revision changes a key", edit(func(d *Delta) { d.Revisions[1].Events = nil })},
		{"empty key", "etcd has no empty key", edit(func(d *Delta) { d.Revisions[0].Events[0].Key = nil })},
		{"bad type", "put or delete", edit(func(d *Delta) { d.Revisions[0].Events[0].Type = 7 })},
		{"bad history", "a cluster ID", edit(func(d *Delta) { d.History = "x" })},
		{"backwards", "To before From", edit(func(d *Delta) { d.From, d.To = 103, 101 })},
	}
	for _, tc := range cases {
		if err := EncodeDelta(&bytes.Buffer{}, tc.d); !errors.Is(err, ErrBadDelta) {
			t.Errorf("%s (%s): encoding gave %v, want ErrBadDelta", tc.name, tc.reason, err)
		}
	}
}

// A delta changed anywhere, or cut anywhere, does not decode to anything
// but itself. (A flag of zstd's frame header, such as whether it carries
// its checksum, can change with the content intact: the delta's own sum
// still holds then.)
func TestDeltaDamaged(t *testing.T) {
	want := sampleDelta()
	good := encoded(t, want)
	for i := range good {
		for _, bit := range []byte{0x01, 0x10, 0x80} {
			flipped := bytes.Clone(good)
			flipped[i] ^= bit
			got, err := DecodeDelta(bytes.NewReader(flipped))
			if err == nil && !cmp.Equal(want, got, cmpopts.EquateEmpty()) {
				t.Errorf("byte %d of %d, bit %#x flipped: decoded to another delta", i, len(good), bit)
			}
			if err != nil && !errors.Is(err, ErrBadDelta) {
				t.Errorf("byte %d of %d, bit %#x flipped: %v, want ErrBadDelta", i, len(good), bit, err)
			}
		}
	}
	for n := range len(good) {
		if _, err := DecodeDelta(bytes.NewReader(good[:n])); !errors.Is(err, ErrBadDelta) {
			t.Errorf("cut to %d of %d bytes: %v, want ErrBadDelta", n, len(good), err)
		}
	}
	if _, err := DecodeDelta(bytes.NewReader(append(bytes.Clone(good), 0))); err == nil {
		t.Error("a byte after the end: decoded")
	}
}

// The end record's checksum covers every record: a delta whose records
// are each well formed but not what was summed is refused.
func TestDeltaChecksum(t *testing.T) {
	raw := func(sum []byte) []byte {
		var b bytes.Buffer
		b.Write(deltaMagic)
		zw, err := zstd.NewWriter(&b)
		if err != nil {
			t.Fatal(err)
		}
		e := &recordWriter{w: zw}
		e.tag(tagHeader).bytes([]byte(testHistory)).int(7).int(7)
		e.tag(tagRevision).int(7).int(at(1).UnixNano()).uint(1)
		e.byte(byte(Put)).bytes([]byte("/k")).bytes([]byte("v")).int(7).int(1).int(0)
		e.tag(tagEnd).uint(1).uint(1).write(sum)
		if err := zw.Close(); err != nil || e.err != nil {
			t.Fatal(err, e.err)
		}
		return b.Bytes()
	}
	// The sum the encoder would write decodes.
	var good bytes.Buffer
	if err := EncodeDelta(&good, &Delta{History: testHistory, From: 7, To: 7, Revisions: []Revision{
		{Revision: 7, Received: at(1), Events: []Event{{Type: Put, Key: []byte("/k"), Value: []byte("v"), CreateRevision: 7, Version: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeDelta(bytes.NewReader(good.Bytes())); err != nil {
		t.Fatalf("the encoder's own delta: %v", err)
	}
	if _, err := DecodeDelta(bytes.NewReader(raw(make([]byte, 32)))); !errors.Is(err, ErrBadDelta) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("records that do not match their sum: %v, want ErrBadDelta naming the checksum", err)
	}
}

func randomDelta(rng *rand.Rand) *Delta {
	d := &Delta{History: testHistory, From: 1 + rng.Int63n(1<<40)}
	n := 1 + rng.Intn(50)
	d.To = d.From + int64(n) - 1
	recv := t0
	for i := range n {
		r := Revision{Revision: d.From + int64(i), Received: recv}
		recv = recv.Add(time.Duration(rng.Intn(1e6)))
		for range 1 + rng.Intn(3) {
			e := Event{Type: Put, Key: []byte{byte('a' + rng.Intn(26))}, CreateRevision: rng.Int63n(d.From + 1), Version: rng.Int63n(100), Lease: rng.Int63n(3)}
			if rng.Intn(4) == 0 {
				e = Event{Type: Delete, Key: e.Key}
			} else {
				e.Value = make([]byte, rng.Intn(300))
				rng.Read(e.Value)
			}
			r.Events = append(r.Events, e)
		}
		d.Revisions = append(d.Revisions, r)
	}
	if rng.Intn(2) == 0 {
		d.Hash = &KVHash{Revision: d.To, CompactRevision: rng.Int63n(d.From), Hash: rng.Uint32()}
	}
	for range rng.Intn(3) {
		d.Leases = append(d.Leases, Lease{ID: rng.Int63(), TTL: rng.Int63n(1e6)})
	}
	return d
}

// FuzzDelta: any delta the archiver can write decodes to itself, and any
// bytes at all decode to a valid delta or fail with ErrBadDelta, never
// panic.
func FuzzDelta(f *testing.F) {
	f.Add(int64(1), []byte(nil))
	f.Add(int64(2), []byte{0x28, 0xb5, 0x2f, 0xfd})
	var b bytes.Buffer
	_ = EncodeDelta(&b, sampleDelta())
	f.Add(int64(3), b.Bytes())
	f.Fuzz(func(t *testing.T, seed int64, raw []byte) {
		want := randomDelta(rand.New(rand.NewSource(seed)))
		var b bytes.Buffer
		if err := EncodeDelta(&b, want); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeDelta(&b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
		if d, err := DecodeDelta(bytes.NewReader(raw)); err == nil {
			if err := d.Validate(); err != nil {
				t.Fatalf("decoded an invalid delta: %v", err)
			}
		} else if !errors.Is(err, ErrBadDelta) {
			t.Fatalf("error %v does not wrap ErrBadDelta", err)
		}
	})
}
