package httpc

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// flaky answers 503 to the first fails requests, then 201 with {"ok":true},
// and records each request's method, Idempotency-Key and Authorization.
type flaky struct {
	mu    sync.Mutex
	fails int
	seen  []http.Header
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, r.Header.Clone())
	if len(f.seen) <= f.fails {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(503)
		w.Write([]byte(`{"status":503,"code":"unavailable","title":"Unavailable","detail":"store busy"}`))
		return
	}
	w.WriteHeader(201)
	w.Write([]byte(`{"ok":true}`))
}

// headers returns the recorded headers.
func (f *flaky) headers() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.seen...)
}

func newTestClient(t *testing.T, h http.Handler, attempts int) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(Config{Base: srv.URL, Token: "secret", Attempts: attempts, Backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestRetryKeepsIdempotencyKey(t *testing.T) {
	f := &flaky{fails: 2}
	c := newTestClient(t, f, 4)
	var out struct{ OK bool }
	status, err := c.Do(context.Background(), Call{Method: "POST", Path: "/x", Body: map[string]int{"a": 1}, Out: &out})
	if err != nil || status != 201 || !out.OK {
		t.Fatalf("Do: %d %v %+v", status, err, out)
	}
	seen := f.headers()
	if len(seen) != 3 {
		t.Fatalf("%d tries, want 3", len(seen))
	}
	key := seen[0].Get("Idempotency-Key")
	for i, h := range seen {
		if h.Get("Idempotency-Key") != key || key == "" {
			t.Errorf("try %d: key %q, want %q on every try", i, h.Get("Idempotency-Key"), key)
		}
		if h.Get("Authorization") != "Bearer secret" {
			t.Errorf("try %d: authorization %q", i, h.Get("Authorization"))
		}
	}
	if _, err := c.Do(context.Background(), Call{Method: "POST", Path: "/x", Body: struct{}{}}); err != nil {
		t.Fatal(err)
	}
	if next := f.headers()[3].Get("Idempotency-Key"); next == key || next == "" {
		t.Errorf("another call: key %q, want a new one", next)
	}
}

func TestGiveUpAndProblem(t *testing.T) {
	f := &flaky{fails: 10}
	c := newTestClient(t, f, 2)
	status, err := c.Do(context.Background(), Call{Method: "GET", Path: "/x"})
	p, ok := IsProblem(err)
	if !ok || status != 503 || p.Code != "unavailable" || p.Error() != "store busy" {
		t.Fatalf("Do: %d %#v", status, err)
	}
	if seen := f.headers(); len(seen) != 2 || seen[0].Get("Idempotency-Key") != "" {
		t.Fatalf("%d tries (want 2), want no key on a GET", len(seen))
	}
}

func TestNoRetryOfOtherErrors(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(409)
		w.Write([]byte(`{"status":409,"code":"run_exists","title":"Run exists","detail":"run exists: a"}`))
	})
	c := newTestClient(t, h, 4)
	_, err := c.Do(context.Background(), Call{Method: "POST", Path: "/x", Body: struct{}{}})
	if p, ok := IsProblem(err); !ok || p.Code != "run_exists" || p.Status != 409 {
		t.Fatalf("Do: %#v", err)
	}
}

func TestNotProblemJSON(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	})
	c := newTestClient(t, h, 4)
	_, err := c.Do(context.Background(), Call{Method: "GET", Path: "/x"})
	if p, ok := IsProblem(err); !ok || p.Status != 502 || p.Code != "" {
		t.Fatalf("Do: %#v", err)
	}
}

func TestBadBase(t *testing.T) {
	for _, base := range []string{"", "127.0.0.1:7070", "ftp://x", "http://"} {
		if _, err := New(Config{Base: base}); err == nil {
			t.Errorf("New(%q): no error", base)
		}
	}
}
