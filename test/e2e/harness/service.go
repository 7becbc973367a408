package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Service is the hook's Service in front of its replicas, as kube-proxy
// makes one: each request goes to the next replica in turn, and a replica
// that refuses the connection (killed, or stopped) is skipped, as its
// endpoint leaves the Service once its readiness fails. With no replica
// left the request fails as a refused connection does.
type Service struct {
	ln       net.Listener
	srv      *http.Server
	client   *http.Client
	backends []string // base URLs
	next     atomic.Uint64
	// answered counts the requests each backend answered.
	answered []atomic.Int64
}

// StartService listens on a free 127.0.0.1 port in front of the backends
// (base URLs).
func StartService(backends ...string) (*Service, error) {
	if len(backends) == 0 {
		return nil, errors.New("service: no backend")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("service listen: %w", err)
	}
	s := &Service{ln: ln, backends: backends, answered: make([]atomic.Int64, len(backends)),
		client: &http.Client{Transport: &http.Transport{Proxy: nil}}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the Service's base URL.
func (s *Service) URL() string { return "http://" + s.ln.Addr().String() }

// Answered is how many requests backend i answered.
func (s *Service) Answered(i int) int64 { return s.answered[i].Load() }

// Close stops the Service.
func (s *Service) Close() error { return s.srv.Close() }

func (s *Service) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	first := s.next.Add(1)
	for i := range len(s.backends) {
		b := int((first + uint64(i)) % uint64(len(s.backends)))
		req, err := http.NewRequestWithContext(r.Context(), r.Method, s.backends[b]+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := s.client.Do(req)
		if err != nil {
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				continue
			}
			dropConnection(w)
			return
		}
		s.answered[b].Add(1)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
		return
	}
	dropConnection(w)
}

// dropConnection answers as a dead peer does: the connection closes.
func dropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	http.Error(w, "no replica", http.StatusBadGateway)
}
