package main

import (
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestGracefulShutdown runs the real main loop and sends it SIGTERM: it
// must stop serving and return cleanly.
func TestGracefulShutdown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	done := make(chan error, 1)
	go func() { done <- run([]string{"--addr", addr, "--shutdown-timeout", "2s", "--log-level", "error"}) }()

	// The signal handler is installed before the server listens, so once
	// /healthz answers, SIGTERM reaches run and not the default handler.
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hook did not start: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after SIGTERM", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return within 5 s of SIGTERM")
	}
}
