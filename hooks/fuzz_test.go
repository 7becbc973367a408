package hooks_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcdhook/etcd-hook/hooks"
	"github.com/etcdhook/etcd-hook/internal/testenv"
)

// Go's fuzzer stalls on inputs of tens of kilobytes, which is what real
// requests are. So the real requests (the captured ones and the fixtures)
// are the fixed base, and the fuzzer mutates a small patch: a splice at an
// offset of a chosen base request, or a replacement parent spec.
func baseRequests(tb testing.TB) [][]byte {
	paths, _ := filepath.Glob(filepath.Join(testenv.Path(tb, "test/fixtures"), "*.json"))
	// The captured requests join the base where they are beside the
	// repository; the fixtures alone are enough to fuzz.
	var captured []string
	if shared, err := testenv.FindSharedDir(); err == nil {
		captured, _ = filepath.Glob(filepath.Join(shared, "metacontroller", "captured", "*.request.json"))
	}
	var out [][]byte
	for _, p := range append(paths, captured...) {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		tb.Fatal("no base requests under test/fixtures")
	}
	return out
}

func patched(bases [][]byte, which uint8, offset uint16, patch []byte, asSpec bool) []byte {
	base := bases[int(which)%len(bases)]
	if asSpec {
		var req map[string]any
		if json.Unmarshal(base, &req) == nil {
			if parent, ok := req["parent"].(map[string]any); ok {
				parent["spec"] = json.RawMessage(patch)
				if b, err := json.Marshal(req); err == nil {
					return b
				}
			}
		}
	}
	at := int(offset) % (len(base) + 1)
	out := append([]byte{}, base[:at]...)
	out = append(out, patch...)
	if end := at + len(patch); end < len(base) {
		out = append(out, base[end:]...)
	}
	return out
}

// FuzzSync sends patched requests through the whole handler and planner:
// the answer is a 200 or a 4xx with a JSON body, never a panic or a 5xx.
func FuzzSync(f *testing.F) {
	bases := baseRequests(f)
	for i := range bases {
		f.Add(uint8(i), uint16(0), []byte(`{"size":3,"version":"3.6.16"}`), true)
		f.Add(uint8(i), uint16(40), []byte(`"x"`), false)
	}
	f.Add(uint8(0), uint16(0), []byte(`{"size":1e99}`), true)
	f.Add(uint8(1), uint16(0), []byte(`{"size":3,"pod":{"labels":{"app":"x"}}}`), true)
	f.Add(uint8(2), uint16(0), []byte(`{"size":3,"version":"v3.6.16-rc.0+meta","paused":true}`), true)
	f.Fuzz(func(t *testing.T, which uint8, offset uint16, patch []byte, asSpec bool) {
		body := patched(bases, which, offset, patch, asSpec)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/sync", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		r := newReconciler(t)
		r.Dialer = noEtcd{}
		hooks.SyncHandler(r).ServeHTTP(rec, req)
		if rec.Code != http.StatusOK && (rec.Code < 400 || rec.Code >= 500) {
			t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("answer is not JSON: %s", rec.Body)
		}
	})
}

// FuzzDecode checks that every decode error is a request error with a 4xx.
func FuzzDecode(f *testing.F) {
	bases := baseRequests(f)
	for i := range bases {
		f.Add(uint8(i), uint16(0), []byte(`{`), false)
		f.Add(uint8(i), uint16(0), []byte(`[]`), true)
	}
	f.Fuzz(func(t *testing.T, which uint8, offset uint16, patch []byte, asSpec bool) {
		_, err := hooks.Decode(patched(bases, which, offset, patch, asSpec))
		var reqErr *hooks.RequestError
		if err != nil && (!errors.As(err, &reqErr) || reqErr.Status < 400 || reqErr.Status >= 500) {
			t.Fatalf("decode error %v is not a 4xx request error", err)
		}
	})
}
