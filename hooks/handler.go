package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/etcdhook/etcd-hook/sync"
)

// MaxBodyBytes bounds a request. A cluster of seven members with every
// child the API server decorates is well under 1 MiB; a bigger body is
// not from Metacontroller.
const MaxBodyBytes = 4 << 20

// Syncer answers one decoded request.
type Syncer interface {
	Sync(ctx context.Context, o *sync.Observed) (sync.Decision, error)
}

// Preparer is a Syncer that can begin a sync as soon as the parent is
// decoded, while the children still are. Prepare returns the context to
// sync with.
type Preparer interface {
	Prepare(ctx context.Context, o *sync.Observed) context.Context
}

// SyncHandler serves POST /sync.
func SyncHandler(s Syncer) http.Handler { return handler{s, false} }

// FinalizeHandler serves POST /finalize.
func FinalizeHandler(s Syncer) http.Handler { return handler{s, true} }

type handler struct {
	syncer   Syncer
	finalize bool
}

// readBody checks a hook request's method and type and reads its body;
// on a bad request it answers and returns false.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		WriteError(w, http.StatusMethodNotAllowed, "use POST with a JSON Metacontroller hook request")
		return nil, false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		WriteError(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			WriteError(w, http.StatusRequestEntityTooLarge, "request body is larger than 4 MiB")
			return nil, false
		}
		WriteError(w, http.StatusBadRequest, "cannot read request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// writeDecodeError answers a request that does not decode.
func writeDecodeError(w http.ResponseWriter, err error) {
	var reqErr *RequestError
	if errors.As(err, &reqErr) {
		WriteError(w, reqErr.Status, reqErr.Msg)
		return
	}
	WriteError(w, http.StatusBadRequest, err.Error())
}

func writeJSON(w http.ResponseWriter, out []byte) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	var parentDecoded func(*sync.Observed)
	if p, ok := h.syncer.(Preparer); ok {
		parentDecoded = func(o *sync.Observed) {
			o.Finalizing = o.Finalizing || h.finalize
			ctx = p.Prepare(ctx, o)
		}
	}
	o, err := decode(body, parentDecoded)
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	if h.finalize {
		o.Finalizing = true
	}
	d, err := h.syncer.Sync(ctx, o)
	if err != nil {
		// Not a 200: Metacontroller applies nothing and retries with backoff.
		WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out, err := Encode(d, h.finalize)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, out)
}

// WriteError answers with a JSON body naming the problem.
func WriteError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
