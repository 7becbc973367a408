package harness

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestServiceSkipsAReplicaThatIsGone: requests go to each replica in turn,
// and once one refuses connections the other answers them all, body and
// path intact, as a Service does once the dead endpoint is removed.
func TestServiceSkipsAReplicaThatIsGone(t *testing.T) {
	replica := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s", name, r.URL.RequestURI(), body)
		}))
	}
	a, b := replica("a"), replica("b")
	defer a.Close()
	svc, err := StartService(a.URL, b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	post := func() string {
		t.Helper()
		resp, err := http.Post(svc.URL()+"/sync?x=1", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return string(out)
	}
	seen := map[string]bool{}
	for range 4 {
		seen[post()] = true
	}
	if !seen["a /sync?x=1 {}"] || !seen["b /sync?x=1 {}"] || len(seen) != 2 {
		t.Fatalf("answers with both replicas up: %v, want both replicas, path and body intact", seen)
	}
	b.Close()
	for range 4 {
		if got := post(); got != "a /sync?x=1 {}" {
			t.Fatalf("with replica b gone: %q, want replica a's answer", got)
		}
	}
	if svc.Answered(0) != 6 || svc.Answered(1) != 2 {
		t.Errorf("answered %d and %d, want 6 and 2", svc.Answered(0), svc.Answered(1))
	}
}
