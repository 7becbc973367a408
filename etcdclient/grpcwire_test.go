package etcdclient

import (
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestDecodeAnswer(t *testing.T) {
	msg, err := proto.Marshal(&pb.StatusResponse{Version: "3.7.3"})
	if err != nil {
		t.Fatal(err)
	}
	framed := func(flag byte, length int, payload []byte) []byte {
		return append([]byte{flag, byte(length >> 24), byte(length >> 16), byte(length >> 8), byte(length)}, payload...)
	}
	const grpcType = "application/grpc"
	for _, tc := range []struct {
		name   string
		answer h2Answer
		want   codes.Code
		reason string
	}{
		{"ok", h2Answer{"200", grpcType, "0", "", framed(0, len(msg), msg)}, codes.OK, "one message, then status 0"},
		{"refused", h2Answer{"200", grpcType, "9", "etcdserver%3A%20no%20leader", nil}, codes.FailedPrecondition, "a refusal, in the headers alone or in the trailers"},
		{"refused after a message", h2Answer{"200", grpcType, "14", "", framed(0, len(msg), msg)}, codes.Unavailable, "the status decides, not the message before it"},
		{"no status", h2Answer{"200", grpcType, "", "", framed(0, len(msg), msg)}, codes.Internal, "an answer cut before its trailers is not an answer"},
		{"compressed", h2Answer{"200", grpcType, "0", "", framed(1, len(msg), msg)}, codes.Internal, "the hook asks for no compression and cannot read one"},
		{"short", h2Answer{"200", grpcType, "0", "", framed(0, len(msg)+3, msg)}, codes.Internal, "a message shorter than its prefix says was cut"},
		{"no message", h2Answer{"200", grpcType, "0", "", nil}, codes.Internal, "a unary call answers one message"},
		{"not gRPC", h2Answer{"200", "text/html", "", "", []byte("<html>")}, codes.Internal, "something other than etcd's gRPC server answered"},
		{"HTTP 503", h2Answer{"503", "text/plain", "", "", nil}, codes.Unavailable, "a proxy in between is unavailable"},
		{"HTTP 404", h2Answer{"404", "text/plain", "", "", nil}, codes.Unimplemented, "as grpc-go maps it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out pb.StatusResponse
			err := tc.answer.decode(&out)
			if got := status.Code(err); got != tc.want {
				t.Errorf("code %v (%v), want %v: %s", got, err, tc.want, tc.reason)
			}
			if tc.want == codes.OK && out.Version != "3.7.3" {
				t.Errorf("decoded %v, want version 3.7.3", &out)
			}
		})
	}
}

func TestGRPCTimeout(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{1500 * time.Millisecond, "1500000u"},
		{time.Nanosecond, "1u"},
		{99 * time.Second, "99000000u"},
		{100 * time.Second, "100000m"},
		{30 * time.Hour, "108000S"},
	} {
		if got := grpcTimeout(tc.d); got != tc.want {
			t.Errorf("grpcTimeout(%v) = %q, want %q (at most 8 digits, rounded up)", tc.d, got, tc.want)
		}
	}
}
