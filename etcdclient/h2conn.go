package etcdclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is one HTTP/2 connection to a member, made of x/net's framer and
// HPACK coder, that carries one request at a time and has no goroutine of
// its own. That is all the hook's calls need, and it is what makes a dial
// cheap and a connection small:
//   - Go's HTTP/2 client keeps a reader goroutine per connection, and keeps
//     a connection it closed within 5 s of its last request for those 5 s
//     (its pool's grace for unused connections): at 10,000 clusters the
//     hook's steady RSS went from 147 to 260 MiB with it (BENCHMARKS.md);
//   - grpc-go's ClientConn costs twice the CPU to dial and five
//     goroutines to keep.
//
// Between calls nothing reads the connection. A call on an idle one first
// checks that the member has not closed it (alive), so that a request is
// never sent into a connection the member has already dropped.
type h2conn struct {
	nc     net.Conn
	scheme string // http or https, as the request says
	br     *bufio.Reader
	bw     *bufio.Writer
	fr     *http2.Framer
	hbuf   bytes.Buffer
	henc   *hpack.Encoder

	nextStream uint32
	// unacked counts the connection's received DATA bytes not yet given
	// back to the member's flow-control window.
	unacked uint32
	// goingAway is set once the member sent GOAWAY: the connection takes
	// no new call.
	goingAway bool
}

// Flow control: what the hook lets a member send before it acknowledges,
// per stream and on the connection. An answer larger than a window is
// read on as it is acknowledged.
const (
	h2Window       = 1 << 20
	h2MaxFrameSize = 16 << 10 // the protocol's default, which the hook keeps
	h2BufferBytes  = 2 << 10
	maxStreamID    = 1<<31 - 1
)

// errNotProcessed marks a call the member did not start (GOAWAY before its
// stream, or REFUSED_STREAM): it is safe to make again on a new
// connection, whatever it does.
var errNotProcessed = errors.New("the member did not process the call")

func newH2Conn(nc net.Conn, scheme string) (*h2conn, error) {
	h := &h2conn{nc: nc, scheme: scheme, br: bufio.NewReaderSize(nc, h2BufferBytes), bw: bufio.NewWriterSize(nc, h2BufferBytes), nextStream: 1}
	h.fr = http2.NewFramer(h.bw, h.br)
	h.fr.SetMaxReadFrameSize(h2MaxFrameSize)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = maxHeaderBytes
	h.henc = hpack.NewEncoder(&h.hbuf)
	// No dynamic table: every header is sent literally or from the static
	// table, which holds whatever table size the member announces.
	h.henc.SetMaxDynamicTableSizeLimit(0)
	if _, err := h.bw.WriteString(http2.ClientPreface); err != nil {
		return nil, err
	}
	err := h.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2Window},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderBytes},
	)
	if err == nil {
		err = h.fr.WriteWindowUpdate(0, h2Window-65535)
	}
	if err != nil {
		return nil, err
	}
	// Flushed with the first request: one write for both.
	return h, nil
}

// alive reports whether the member has not closed the connection while it
// was idle. Frames it sent meanwhile (a ping, its settings, a GOAWAY) stay
// buffered for the next call to read.
func (h *h2conn) alive() bool {
	if h.goingAway {
		return false
	}
	_ = h.nc.SetReadDeadline(time.Now())
	_, err := h.br.Peek(1)
	_ = h.nc.SetReadDeadline(time.Time{})
	return err == nil || errors.Is(err, os.ErrDeadlineExceeded)
}

// h2Answer is what came back on a call's stream.
type h2Answer struct {
	status      string // :status
	contentType string
	// grpcStatus and grpcMessage, from the trailers, or from the headers
	// of a trailers-only answer.
	grpcStatus, grpcMessage string
	body                    []byte
}

// h2Request is one call: its path, headers and length-prefixed message.
type h2Request struct {
	path    string
	headers [][2]string
	body    []byte
}

// calls makes the requests at once, each on its own stream, and reads
// every answer: a member asked for two things answers both in one round
// trip. The context bounds them through the connection's deadline. An
// error of the connection leaves it unusable, and the caller closes it; a
// stream the member reset is that call's error alone (errs).
func (h *h2conn) calls(ctx context.Context, authority string, reqs []h2Request) (answers []*h2Answer, errs []error, err error) {
	for _, r := range reqs {
		if len(r.body) > h2MaxFrameSize {
			// Every request the hook makes is a few hundred bytes; one DATA
			// frame, inside any window a member starts with.
			return nil, nil, fmt.Errorf("a request of %d bytes, over %d", len(r.body), h2MaxFrameSize)
		}
	}
	deadline, _ := ctx.Deadline()
	_ = h.nc.SetDeadline(deadline)
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = h.nc.SetDeadline(time.Unix(1, 0))
		close(unblocked)
	})
	defer func() {
		// Once started, it must end before the next call sets its own
		// deadline.
		if !stop() {
			<-unblocked
		}
	}()

	streams := make(map[uint32]int, len(reqs))
	for i, r := range reqs {
		id := h.nextStream
		h.nextStream += 2
		if h.nextStream > maxStreamID {
			// Stream IDs are never reused: the next call dials afresh.
			h.goingAway = true
		}
		streams[id] = i
		if err := h.writeRequest(id, authority, r.path, r.headers, r.body); err != nil {
			return nil, nil, err
		}
	}
	if err := h.bw.Flush(); err != nil {
		return nil, nil, err
	}
	answers, errs = make([]*h2Answer, len(reqs)), make([]error, len(reqs))
	if err := h.readAnswers(streams, answers, errs); err != nil {
		return nil, nil, err
	}
	return answers, errs, nil
}

func (h *h2conn) writeRequest(id uint32, authority, path string, headers [][2]string, body []byte) error {
	h.hbuf.Reset()
	fields := append([][2]string{{":method", "POST"}, {":scheme", h.scheme}, {":path", path}, {":authority", authority}}, headers...)
	for _, f := range fields {
		if err := h.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return err
		}
	}
	if h.hbuf.Len() > h2MaxFrameSize {
		return fmt.Errorf("request headers of %d bytes", h.hbuf.Len())
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	return h.fr.WriteData(id, true, body)
}

// readAnswers reads frames until every stream of streams (by ID, the index
// of its answer) has ended or been reset.
func (h *h2conn) readAnswers(streams map[uint32]int, answers []*h2Answer, errs []error) error {
	received := make(map[uint32]uint32, len(streams)) // unacknowledged, per open stream
	open := len(streams)
	end := func(id uint32, err error) {
		i := streams[id]
		if err != nil {
			answers[i], errs[i] = nil, err
		}
		delete(streams, id)
		delete(received, id)
		open--
	}
	for open > 0 {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := h.ack(h.fr.WriteSettingsAck()); err != nil {
					return err
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := h.ack(h.fr.WritePing(true, f.Data)); err != nil {
					return err
				}
			}
		case *http2.GoAwayFrame:
			h.goingAway = true
			for id := range streams {
				if id > f.LastStreamID {
					end(id, fmt.Errorf("%w: the member is going away (GOAWAY %v)", errNotProcessed, f.ErrCode))
				}
			}
		case *http2.RSTStreamFrame:
			if _, ok := streams[f.StreamID]; !ok {
				continue
			}
			if f.ErrCode == http2.ErrCodeRefusedStream {
				end(f.StreamID, fmt.Errorf("%w: stream refused", errNotProcessed))
			} else {
				end(f.StreamID, http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode})
			}
		case *http2.MetaHeadersFrame:
			i, ok := streams[f.StreamID]
			if !ok {
				continue
			}
			a := answers[i]
			if a == nil {
				a = &h2Answer{status: f.PseudoValue("status")}
				answers[i] = a
				for _, hf := range f.RegularFields() {
					if strings.EqualFold(hf.Name, "content-type") {
						a.contentType = hf.Value
					}
				}
			}
			for _, hf := range f.RegularFields() {
				switch strings.ToLower(hf.Name) {
				case "grpc-status":
					a.grpcStatus = hf.Value
				case "grpc-message":
					a.grpcMessage = hf.Value
				}
			}
			if f.StreamEnded() {
				end(f.StreamID, nil)
			}
		case *http2.DataFrame:
			n := f.Header().Length
			h.unacked += n
			if i, ok := streams[f.StreamID]; ok {
				a := answers[i]
				if a == nil {
					return fmt.Errorf("stream %d: data before headers", f.StreamID)
				}
				if len(a.body)+len(f.Data()) > maxAnswerBytes+5 {
					return fmt.Errorf("an answer over %d bytes", maxAnswerBytes)
				}
				a.body = append(a.body, f.Data()...)
				if f.StreamEnded() {
					end(f.StreamID, nil)
				} else if received[f.StreamID] += n; received[f.StreamID] >= h2Window/2 {
					if err := h.fr.WriteWindowUpdate(f.StreamID, received[f.StreamID]); err != nil {
						return err
					}
					received[f.StreamID] = 0
				}
			}
			if err := h.giveBack(); err != nil {
				return err
			}
		}
	}
	return nil
}

// giveBack acknowledges the connection's received data once half its
// window is used (and writes any stream's acknowledgement with it).
func (h *h2conn) giveBack() error {
	if h.unacked >= h2Window/2 {
		if err := h.fr.WriteWindowUpdate(0, h.unacked); err != nil {
			return err
		}
		h.unacked = 0
	}
	return h.bw.Flush()
}

func (h *h2conn) ack(err error) error {
	if err != nil {
		return err
	}
	return h.bw.Flush()
}

func (h *h2conn) close() error { return h.nc.Close() }
