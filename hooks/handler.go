package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/etcdhook/etcd-hook/plan/etcdcluster"
)

// MaxBodyBytes bounds a request. A cluster of seven members with every
// child the API server decorates is well under 1 MiB; a bigger body is
// not from Metacontroller.
const MaxBodyBytes = 4 << 20

// Syncer answers one decoded request of an EtcdCluster.
//
// Prepare is called as soon as the parent is decoded, while its children
// still are, and may begin work that does not need them: the reconciler
// begins its read of etcd there, so that the round trip overlaps the
// decoding. What Prepare returns is handed to Sync, explicitly; a Syncer
// with nothing to begin returns the zero value of P.
type Syncer[P any] interface {
	Prepare(ctx context.Context, o *etcdcluster.Observed) P
	Sync(ctx context.Context, o *etcdcluster.Observed, prepared P) (etcdcluster.Decision, error)
}

// SyncHandler serves POST /sync.
func SyncHandler[P any](s Syncer[P]) http.Handler { return handler[P]{s, false} }

// FinalizeHandler serves POST /finalize.
func FinalizeHandler[P any](s Syncer[P]) http.Handler { return handler[P]{s, true} }

type handler[P any] struct {
	syncer   Syncer[P]
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

func (h handler[P]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	var prepared P
	o, err := decode(body, func(o *etcdcluster.Observed) {
		o.Finalizing = o.Finalizing || h.finalize
		prepared = h.syncer.Prepare(ctx, o)
	})
	if err != nil {
		writeDecodeError(w, err)
		return
	}
	if h.finalize {
		o.Finalizing = true
	}
	d, err := h.syncer.Sync(ctx, o, prepared)
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
