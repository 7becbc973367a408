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
//     (its pool's grace for unused connections): a hook that dials 500
//     members a second held 2,500 closed ones, 45 MiB;
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

// call makes one request and reads its whole answer. The context bounds it
// through the connection's deadline. Any error leaves the connection
// unusable: the caller closes it.
func (h *h2conn) call(ctx context.Context, authority, path string, headers [][2]string, body []byte) (*h2Answer, error) {
	if len(body) > h2MaxFrameSize {
		// Every request the hook makes is a few hundred bytes; one DATA
		// frame, inside any window a member starts with.
		return nil, fmt.Errorf("a request of %d bytes, over %d", len(body), h2MaxFrameSize)
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

	id := h.nextStream
	h.nextStream += 2
	if err := h.writeRequest(id, authority, path, headers, body); err != nil {
		return nil, err
	}
	return h.readAnswer(id)
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
	if err := h.fr.WriteData(id, true, body); err != nil {
		return err
	}
	return h.bw.Flush()
}

func (h *h2conn) readAnswer(id uint32) (*h2Answer, error) {
	var (
		a           h2Answer
		gotHeaders  bool
		streamBytes uint32
	)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := h.ack(h.fr.WriteSettingsAck()); err != nil {
					return nil, err
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := h.ack(h.fr.WritePing(true, f.Data)); err != nil {
					return nil, err
				}
			}
		case *http2.GoAwayFrame:
			h.goingAway = true
			if f.LastStreamID < id {
				return nil, fmt.Errorf("%w: the member is going away (GOAWAY %v)", errNotProcessed, f.ErrCode)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID != id {
				continue
			}
			if f.ErrCode == http2.ErrCodeRefusedStream {
				return nil, fmt.Errorf("%w: stream refused", errNotProcessed)
			}
			return nil, http2.StreamError{StreamID: id, Code: f.ErrCode}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			if !gotHeaders {
				gotHeaders = true
				a.status = f.PseudoValue("status")
				for _, hf := range f.RegularFields() {
					switch strings.ToLower(hf.Name) {
					case "content-type":
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
				return &a, nil
			}
		case *http2.DataFrame:
			n := f.Header().Length
			h.unacked += n
			if f.StreamID == id {
				streamBytes += n
				if len(a.body)+len(f.Data()) > maxAnswerBytes+5 {
					return nil, fmt.Errorf("an answer over %d bytes", maxAnswerBytes)
				}
				a.body = append(a.body, f.Data()...)
				if f.StreamEnded() {
					return &a, h.giveBack(0, 0)
				}
			}
			if err := h.giveBack(id, streamBytes); err != nil {
				return nil, err
			}
			if streamBytes >= h2Window/2 {
				streamBytes = 0
			}
		}
	}
}

// giveBack acknowledges received data once half a window is used: on the
// stream (while it is open) and on the connection.
func (h *h2conn) giveBack(id, streamBytes uint32) error {
	wrote := false
	if id != 0 && streamBytes >= h2Window/2 {
		if err := h.fr.WriteWindowUpdate(id, streamBytes); err != nil {
			return err
		}
		wrote = true
	}
	if h.unacked >= h2Window/2 {
		if err := h.fr.WriteWindowUpdate(0, h.unacked); err != nil {
			return err
		}
		h.unacked, wrote = 0, true
	}
	if wrote {
		return h.bw.Flush()
	}
	return nil
}

func (h *h2conn) ack(err error) error {
	if err != nil {
		return err
	}
	return h.bw.Flush()
}

func (h *h2conn) close() error { return h.nc.Close() }
