package etcdclient

import (
	"context"
	"encoding/binary"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// gRPC's unary call on the wire, as memberConn speaks it: the request's
// length-prefixed message and headers, the answer's message and status,
// and the status codes of what HTTP/2 and HTTP end a call with, as
// grpc-go maps them.

// request is the call's length-prefixed message and its headers.
func request(ctx context.Context, method string, msg proto.Message) ([]byte, [][2]string, error) {
	body, err := proto.Marshal(msg)
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "%s: encoding the request: %v", method, err)
	}
	// The length-prefixed message: not compressed, then its length.
	framed := make([]byte, 5+len(body))
	binary.BigEndian.PutUint32(framed[1:5], uint32(len(body)))
	copy(framed[5:], body)
	headers := [][2]string{{"content-type", "application/grpc"}, {"te", "trailers"}}
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
		// The member stops working on the call when the hook stops
		// waiting for it.
		headers = append(headers, [2]string{"grpc-timeout", grpcTimeout(left)})
	}
	return framed, headers, nil
}

// grpcTimeout writes a timeout as the grpc-timeout header does: at most 8
// digits and a unit.
func grpcTimeout(d time.Duration) string {
	const maxDigits = 1e8
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Hour, "H"}} {
		if n := (d + u.unit - 1) / u.unit; n < maxDigits {
			return strconv.FormatInt(int64(n), 10) + u.name
		}
	}
	return "99999999H"
}

// decode reads one unary answer into out: the HTTP status, the one
// message, and the gRPC status, which a refusal may send in the headers
// alone.
func (a *h2Answer) decode(out proto.Message) error {
	if a.status != "200" {
		code, _ := strconv.Atoi(a.status)
		return status.Errorf(httpStatusCode(code), "etcd answered HTTP %s", a.status)
	}
	if !strings.HasPrefix(a.contentType, "application/grpc") {
		return status.Errorf(codes.Internal, "etcd answered with content type %q, not gRPC", a.contentType)
	}
	if a.grpcStatus == "" {
		return status.Error(codes.Internal, "the answer ended without a gRPC status")
	}
	if err := statusFrom(a.grpcStatus, a.grpcMessage); err != nil {
		return err
	}
	data := a.body
	switch {
	case len(data) < 5:
		return status.Errorf(codes.Internal, "an answer of %d bytes holds no message", len(data))
	case data[0] != 0:
		return status.Error(codes.Internal, "a compressed answer, which the hook did not ask for")
	case int(binary.BigEndian.Uint32(data[1:5])) != len(data)-5:
		return status.Errorf(codes.Internal, "an answer of %d bytes after its prefix, which says %d", len(data)-5, binary.BigEndian.Uint32(data[1:5]))
	}
	if err := proto.Unmarshal(data[5:], out); err != nil {
		return status.Errorf(codes.Internal, "decoding the answer: %v", err)
	}
	return nil
}

// statusFrom is the error of a grpc-status and grpc-message pair; nil for
// OK.
func statusFrom(code, message string) error {
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return status.Errorf(codes.Internal, "a gRPC status of %q", code)
	}
	if n == uint64(codes.OK) {
		return nil
	}
	// The message is percent-encoded; one that is not is kept as sent.
	if decoded, err := url.PathUnescape(message); err == nil {
		message = decoded
	}
	return status.Error(codes.Code(n), message)
}

// expired reports whether the call's deadline has passed, by the clock:
// the context's own timer may not have fired yet.
func expired(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// resetCode is the status of a call the member reset, as grpc-go maps it.
// A member ends a call whose deadline it was sent with CANCEL, a moment
// before the hook's own timer fires: that is the deadline.
func resetCode(ctx context.Context, code http2.ErrCode) codes.Code {
	switch code {
	case http2.ErrCodeCancel:
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < resetMargin {
			return codes.DeadlineExceeded
		}
		return codes.Canceled
	case http2.ErrCodeRefusedStream:
		return codes.Unavailable
	case http2.ErrCodeEnhanceYourCalm:
		return codes.ResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		return codes.PermissionDenied
	}
	return codes.Internal
}

// resetMargin is how far ahead of the hook's own deadline a member's
// timer may fire: the grpc-timeout it is sent is counted from a moment
// before the call is written.
const resetMargin = 20 * time.Millisecond

// httpStatusCode maps an HTTP status that is not a gRPC answer as gRPC's
// own clients do.
func httpStatusCode(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest:
		return codes.Internal
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	}
	return codes.Unknown
}
