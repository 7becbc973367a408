package shard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// Headers of the replicas' own protocol.
const (
	// ForwardedHeader marks a request one replica sent another; the
	// receiver answers it itself, whoever it thinks owns it.
	ForwardedHeader = "X-Etcd-Hook-Forwarded-By"
	// ReplicaHeader names the replica that answered a sync. A forwarded
	// answer without it did not come from a hook, and the sync is
	// answered where it arrived instead.
	ReplicaHeader = "X-Etcd-Hook-Replica"
)

// Outcome is what became of one sync request.
type Outcome string

const (
	// Owned: answered here, the owner (or no peer is known).
	Owned Outcome = "owned"
	// Received: answered here, forwarded by another replica.
	Received Outcome = "received"
	// Forwarded: answered by the owner.
	Forwarded Outcome = "forwarded"
	// Fallback: the owner could not be reached before the request was
	// sent; answered here.
	Fallback Outcome = "fallback"
	// Failed: sent to the owner, which gave no answer; a 502.
	Failed Outcome = "failed"
)

// Router is the middleware in front of the sync handlers.
type Router struct {
	Peers *Peers
	// Client sends forwarded requests; its transport dials peers over
	// https when the hook serves TLS, and must not follow redirects.
	Client *http.Client
	Scheme string // "http" or "https"
	// MaxBodyBytes bounds what is read to find the owner; a larger body
	// goes to the local handler, which refuses it.
	MaxBodyBytes int64
	// Routed, when set, is told every request's outcome and the owner
	// ("" when answered here).
	Routed func(o Outcome, owner string, err error)
}

// Handler answers a sync where its parent is owned.
func (rt *Router) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ReplicaHeader, rt.Peers.SelfName())
		if r.Method != http.MethodPost || r.Header.Get(ForwardedHeader) != "" {
			if r.Method == http.MethodPost {
				rt.routed(Received, "", nil)
			}
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, rt.MaxBodyBytes+1))
		if err != nil {
			// The handler reads what is left and answers the error.
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
			next.ServeHTTP(w, r)
			return
		}
		if int64(len(body)) > rt.MaxBodyBytes {
			// Too large for any hook: the handler here reads it all and
			// refuses it.
			rt.routed(Owned, "", nil)
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
			next.ServeHTTP(w, r)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		owner := ""
		if key, err := ParentKey(body); err == nil {
			owner = Owner(key, rt.Peers.Current())
		}
		if owner == "" || rt.Peers.Self(owner) {
			rt.routed(Owned, "", nil)
			next.ServeHTTP(w, r)
			return
		}
		if sent, err := rt.forward(w, r, owner, body); err != nil {
			if sent {
				rt.routed(Failed, owner, err)
				writeError(w, http.StatusBadGateway, fmt.Sprintf("the sync was forwarded to replica %s, which owns this parent, and gave no answer: %v", owner, err))
				return
			}
			rt.routed(Fallback, owner, err)
			r.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(w, r)
			return
		}
		rt.routed(Forwarded, owner, nil)
	})
}

// forward posts body to owner and copies its answer to w. sent says
// whether the owner may have acted on the request: it was written in full
// and the owner's hook may have answered it.
func (rt *Router) forward(w http.ResponseWriter, r *http.Request, owner string, body []byte) (sent bool, err error) {
	var written atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			written.Store(true)
		}
	}}
	ctx := httptrace.WithClientTrace(r.Context(), trace)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rt.Scheme+"://"+owner+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
	req.Header.Set(ForwardedHeader, rt.Peers.SelfName())
	resp, err := rt.Client.Do(req)
	if err != nil {
		return written.Load(), err
	}
	defer resp.Body.Close()
	if resp.Header.Get(ReplicaHeader) == "" {
		// Not a hook's answer (a port serving something else): no hook
		// acted on it.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return false, fmt.Errorf("%s answered %s without naming a replica: not the hook", owner, resp.Status)
	}
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return true, fmt.Errorf("read the answer: %w", err)
	}
	h := w.Header()
	h.Set(ReplicaHeader, resp.Header.Get(ReplicaHeader))
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		h.Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
	return true, nil
}

func (rt *Router) routed(o Outcome, owner string, err error) {
	if rt.Routed != nil {
		rt.Routed(o, owner, err)
	}
}

// writeError answers as the hooks do: a JSON body naming the problem.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
