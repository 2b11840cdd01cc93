package server

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// /healthz and /readyz answer without a token; readyz checks the store.
func TestHealthAndReadiness(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			e.do("GET", "/healthz", "", nil).want(t, 200)
			e.do("GET", "/readyz", "", nil).want(t, 200)
			e.st.Close() // the store stops answering
			e.do("GET", "/readyz", "", nil).problem(t, 503, "unavailable")
			e.do("GET", "/healthz", "", nil).want(t, 200)
		})
	}
}

// Shutdown answers a long poll in flight at once (202, the run as it is), lets
// the server's requests finish, and then refuses connections.
func TestShutdownEndsLongPolls(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	run := e.start("await-go", nil, nil)
	polled := make(chan *resp, 1)
	go func() {
		polled <- e.do("GET", "/v1/namespaces/default/runs/"+run.ID+"/result?wait=10s", "reader", nil)
	}()
	// Wait until the poll is in flight: the server holds one active connection.
	e.until(run.ID, func() bool { return e.srv.activeRequests() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-polled
	r.want(t, 202)
	var got trellis.Run
	r.decode(t, &got)
	if got.ID != run.ID || got.Status.Terminal() {
		t.Fatalf("long poll answered %+v", got)
	}
	// A client of its own: the default one may hold a kept-alive connection to
	// the server from before, which the shutdown closed (EOF, not refused).
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if _, err := fresh.Post(e.base+"/v1/namespaces/default/runs", "application/json",
		bytes.NewReader([]byte(`{"workflow":"echo"}`))); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("after shutdown: %v", err)
	}
}

// Over MaxInFlight, a request is answered 429 at once; health checks still answer.
func TestInFlightLimit(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.MaxInFlight = 1 })
	run := e.start("await-go", nil, nil)
	polled := make(chan *resp, 1)
	go func() {
		polled <- e.do("GET", "/v1/namespaces/default/runs/"+run.ID+"/result?wait=10s", "reader", nil)
	}()
	e.until(run.ID, func() bool { return e.srv.activeRequests() > 0 })
	r := e.do("GET", "/v1/namespaces/default/runs", "reader", nil)
	r.problem(t, 429, "rate_limited")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	e.do("GET", "/healthz", "", nil).want(t, 200)
	e.do("POST", "/v1/namespaces/default/runs/"+run.ID+"/events", "producer", map[string]any{"name": "go"}).problem(t, 429, "rate_limited")
	if err := e.worker.SendEvent(context.Background(), run.ID, "go", "direct"); err != nil {
		t.Fatal(err)
	}
	(<-polled).want(t, 200)
	e.do("GET", "/v1/namespaces/default/runs", "reader", nil).want(t, 200)
}
