package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Fault describes what the proxy does to matching hook requests.
type Fault struct {
	Path   string // "/sync", "/finalize"; "" matches any
	Parent string // "namespace/name"; "" matches any
	// Delay holds the request before forwarding it (or before answering
	// Status), e.g. to exceed Metacontroller's hook timeout.
	Delay time.Duration
	// Status, when non-zero, is answered instead of forwarding.
	Status int
	Body   string
	// Drop closes the connection without answering.
	Drop bool
	// DropResponse forwards the request to the hook, lets it finish, and
	// then closes the connection without relaying the answer: the hook acted
	// (say, a MemberAdd), and Metacontroller never learns what it answered.
	DropResponse bool
	// Times is how many requests the fault applies to; 0 means until cleared.
	Times int
}

type faultEntry struct {
	f    Fault
	used int
}

// FaultProxy sits between the Metacontroller emulator and the hook: a real
// HTTP reverse proxy on 127.0.0.1 that forwards requests untouched unless a
// fault matches.
type FaultProxy struct {
	ln     net.Listener
	srv    *http.Server
	rp     *httputil.ReverseProxy
	mu     sync.Mutex
	target *url.URL
	faults []*faultEntry

	Forwarded atomic.Int64
	Faulted   atomic.Int64
	// DroppedResponses counts answers the hook gave that a DropResponse
	// fault kept from Metacontroller.
	DroppedResponses atomic.Int64
}

// StartFaultProxy listens on a free 127.0.0.1 port and forwards to target.
func StartFaultProxy(target string) (*FaultProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("fault proxy target: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy listen: %w", err)
	}
	p := &FaultProxy{ln: ln, target: u}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			p.mu.Lock()
			t := p.target
			p.mu.Unlock()
			r.SetURL(t)
		},
		Transport: &http.Transport{Proxy: nil},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The hook is down: Metacontroller would see a connection
			// error, so answer like a dead peer rather than a 502.
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, herr := hj.Hijack(); herr == nil {
					c.Close()
					return
				}
			}
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL.
func (p *FaultProxy) URL() string { return "http://" + p.ln.Addr().String() }

// SetTarget points the proxy at another hook address.
func (p *FaultProxy) SetTarget(target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Errorf("fault proxy target: %w", err)
	}
	p.mu.Lock()
	p.target = u
	p.mu.Unlock()
	return nil
}

// Inject adds a fault; the returned func removes it.
func (p *FaultProxy) Inject(f Fault) func() {
	e := &faultEntry{f: f}
	p.mu.Lock()
	p.faults = append(p.faults, e)
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, x := range p.faults {
			if x == e {
				p.faults = append(p.faults[:i], p.faults[i+1:]...)
				return
			}
		}
	}
}

// Clear removes all faults.
func (p *FaultProxy) Clear() {
	p.mu.Lock()
	p.faults = nil
	p.mu.Unlock()
}

// Close stops the proxy.
func (p *FaultProxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		return errors.Join(err, p.srv.Close())
	}
	return nil
}

func requestParent(body []byte) string {
	var req struct {
		Parent struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		} `json:"parent"`
	}
	if json.Unmarshal(body, &req) != nil {
		return ""
	}
	return req.Parent.Metadata.Namespace + "/" + req.Parent.Metadata.Name
}

func (p *FaultProxy) match(path, parent string) *Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, e := range p.faults {
		if (e.f.Path != "" && e.f.Path != path) || (e.f.Parent != "" && e.f.Parent != parent) {
			continue
		}
		e.used++
		f := e.f
		if f.Times > 0 && e.used >= f.Times {
			p.faults = append(p.faults[:i], p.faults[i+1:]...)
		}
		return &f
	}
	return nil
}

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	f := p.match(r.URL.Path, requestParent(body))
	if f == nil {
		p.Forwarded.Add(1)
		p.rp.ServeHTTP(w, r)
		return
	}
	p.Faulted.Add(1)
	if f.Delay > 0 && !sleepCtx(r.Context(), f.Delay) {
		return
	}
	switch {
	case f.Drop:
		hangUp(w)
	case f.DropResponse:
		p.Forwarded.Add(1)
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, r)
		p.DroppedResponses.Add(1)
		hangUp(w)
	case f.Status != 0:
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(f.Status)
		_, _ = io.WriteString(w, f.Body)
	default:
		p.Forwarded.Add(1)
		p.rp.ServeHTTP(w, r)
	}
}

// hangUp closes the client connection without an HTTP answer.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
