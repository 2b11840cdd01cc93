package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The bench's lean HTTP/1.1 client reads what net/http's server writes: bodies
// with a Content-Length, chunked bodies (over the server's 2 KiB buffer), empty
// 204s, in a row on one keep-alive connection, and notices a closing server.
// Every POST carries an Idempotency-Key of its own; a GET none.
func TestConnReadsServerResponses(t *testing.T) {
	big := strings.Repeat("x", 10_000)
	keys := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if (r.Method == "POST") != (key != "") || keys[key] {
			t.Errorf("%s %s with Idempotency-Key %q (seen before: %v)", r.Method, r.URL.Path, key, keys[key])
		}
		if key != "" {
			keys[key] = true
		}
		switch r.URL.Path {
		case "/small":
			w.WriteHeader(201)
			w.Write([]byte(`{"ok":true}`))
		case "/big":
			w.Write([]byte(big))
		case "/empty":
			w.WriteHeader(204)
		case "/close":
			w.Header().Set("Connection", "close")
			w.Write([]byte("bye"))
		}
	}))
	defer srv.Close()
	c, err := dial(t.Context(), RemoteOptions{Server: srv.URL, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for range 2 {
		for _, want := range []struct {
			path, body string
			status     int
		}{{"/small", `{"ok":true}`, 201}, {"/big", big, 200}, {"/empty", "", 204}} {
			status, b, err := c.do("GET", want.path, nil)
			if err != nil || status != want.status || string(b) != want.body {
				t.Fatalf("%s: %d %d bytes %v", want.path, status, len(b), err)
			}
		}
		status, b, err := c.do("POST", "/small", []byte(`{}`))
		if err != nil || status != 201 || string(b) != `{"ok":true}` {
			t.Fatalf("POST: %d %s %v", status, b, err)
		}
	}
	if _, _, err := c.do("GET", "/close", nil); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("a closing server: %v", err)
	}
}
