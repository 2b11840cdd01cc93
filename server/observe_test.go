package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// GET /metrics needs role reader on every namespace; it counts the API's
// requests by route and code, and the store's unfinished runs.
func TestMetricsRoute(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	e.start("nobody-serves", nil, nil)
	e.do("GET", "/v1/namespaces/default/runs/nope", "reader", nil).want(t, 404)
	e.do("GET", "/metrics", "reader", nil).problem(t, 403, "permission_denied")
	e.do("GET", "/metrics", "", nil).problem(t, 401, "unauthenticated")
	r := e.do("GET", "/metrics", "global-reader", nil).want(t, 200)
	text := string(r.body)
	for _, want := range []string{
		`trellis_api_requests_total{code="201",route="startRun"} 1`,
		`trellis_api_requests_total{code="404",route="getRun"} 1`,
		`trellis_api_requests_total{code="403",route="metrics"} 1`,
		`trellis_api_request_duration_seconds_count{route="startRun"} 1`,
		`trellis_runs_started_total{workflow="nobody-serves"} 1`,
		`trellis_runs{namespace="default",queue="default",status="pending"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// A run started through the API keeps the caller's trace context (its
// traceparent header), for its executions to join that trace.
func TestStartKeepsTraceparent(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var run struct {
		ID string `json:"id"`
	}
	e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "traced"}, "traceparent", tp).
		want(t, 201).decode(t, &run)
	got, err := e.st.RunGet(context.Background(), &store.RunGetParams{Namespace: "default", Ref: run.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.TraceParent != tp {
		t.Fatalf("stored trace parent %q, want %q", got.TraceParent, tp)
	}
	// So does each run of a batch start.
	var batch trellis.StartManyResponse
	e.do("POST", "/v1/namespaces/default/runs:batch", "producer", map[string]any{"runs": []any{
		map[string]any{"workflow": "traced", "id": "b1"}, map[string]any{"workflow": "traced", "id": "b2"}}}, "traceparent", tp).
		want(t, 200).decode(t, &batch)
	for i, r := range batch.Results {
		if r.Run == nil {
			t.Fatalf("batch result %d: %+v", i, r)
		}
		got, err := e.st.RunGet(context.Background(), &store.RunGetParams{Namespace: "default", Ref: r.Run.ID})
		if err != nil || got.TraceParent != tp {
			t.Fatalf("batch run %d: stored trace parent %q (%v), want %q", i, got.TraceParent, err, tp)
		}
	}
	// A malformed header is ignored, not stored.
	e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "traced", "id": "x2"}, "traceparent", "garbage").
		want(t, 201).decode(t, &run)
	if got, _ := e.st.RunGet(context.Background(), &store.RunGetParams{Namespace: "default", Ref: run.ID}); got.TraceParent != "" {
		t.Fatalf("malformed traceparent stored as %q", got.TraceParent)
	}
}

// trellis_stream_subscribers counts the open event streams (a closed one is
// noticed by the probe, or at its next keep-alive).
func TestMetricsStreamSubscribers(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.StreamHeartbeat = 20 * time.Millisecond })
	if err := e.worker.Register(context.Background(), streamWF); err != nil {
		t.Fatal(err)
	}
	run := e.start("streamer", nil, nil)
	gauge := func() string {
		text := string(e.do("GET", "/metrics", "global-reader", nil).want(t, 200).body)
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "trellis_stream_subscribers ") {
				return l
			}
		}
		return ""
	}
	if g := gauge(); g != "trellis_stream_subscribers 0" {
		t.Fatalf("before any stream: %q", g)
	}
	waitGauge := func(want string) {
		deadline := time.Now().Add(5 * time.Second)
		for gauge() != want {
			if time.Now().After(deadline) {
				t.Fatalf("gauge %q, want %q", gauge(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	s := e.openStream(run.ID, "?after=now", "reader")
	waitGauge("trellis_stream_subscribers 1")
	s.close()
	waitGauge("trellis_stream_subscribers 0")
}
