package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/clock"
)

// streamWF emits three events, waits for the event "go", emits two more around
// a step that fails once (each attempt lasts streamStepPause), and returns: its
// stream is run.started, a, a, a, run.waiting, run.resumed, b, step.failed,
// step.completed, b, run.succeeded — with replays
// in between (after the wait) that must publish nothing twice.
var streamWF = trellis.NewWorkflow("streamer", func(wc *trellis.Context, _ any) (string, error) {
	for i := range 3 {
		if err := trellis.Emit(wc, "a", map[string]int{"i": i}); err != nil {
			return "", err
		}
	}
	if _, err := trellis.WaitEvent[string](wc, "go", 0); err != nil {
		return "", err
	}
	if err := trellis.Emit(wc, "b", 1); err != nil {
		return "", err
	}
	var tries atomic.Int32
	if _, err := trellis.Step(wc, "flaky", func(context.Context) (int, error) {
		time.Sleep(streamStepPause) // each attempt lasts at least this: its event's duration_ms
		if tries.Add(1) == 1 {
			return 0, errors.New("first try fails")
		}
		return 1, nil
	}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(time.Millisecond)}}); err != nil {
		return "", err
	}
	if err := trellis.Emit(wc, "b", 2); err != nil {
		return "", err
	}
	return "done", nil
})

// streamStepPause is how long each attempt of the streamer's step lasts at least.
const streamStepPause = 20 * time.Millisecond

var streamNames = []string{"run.started", "a", "a", "a", "run.waiting", "run.resumed", "b", "step.failed", "step.completed", "b", "run.succeeded"}

// sseEvent is an event as read off the wire.
type sseEvent struct {
	id, name, data string
}

// sse is an open event stream.
type sse struct {
	resp     *http.Response
	sc       *bufio.Scanner
	cancel   context.CancelFunc
	comments int
}

// openStream opens GET .../stream of run id with query and headers (name, value...).
func (e *env) openStream(id, query, token string, hdr ...string) *sse {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	url := e.base + "/v1/namespaces/default/runs/" + id + "/stream" + query
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		e.t.Fatalf("stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	s := &sse{resp: res, sc: bufio.NewScanner(res.Body), cancel: cancel}
	e.t.Cleanup(s.close)
	return s
}

func (s *sse) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads the next event; ok is false at the end of the stream.
func (s *sse) next(t *testing.T) (ev sseEvent, ok bool) {
	t.Helper()
	timer := time.AfterFunc(15*time.Second, s.cancel)
	defer timer.Stop()
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "" && ev.name != "":
			return ev, true
		case strings.HasPrefix(line, ":"):
			s.comments++
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data += line[6:]
		}
	}
	return ev, false
}

// readAll reads events until the stream ends.
func (s *sse) readAll(t *testing.T) []sseEvent {
	t.Helper()
	var out []sseEvent
	for {
		ev, ok := s.next(t)
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// wantEvents checks the events' ids (from first on, without gaps) and names.
func wantEvents(t *testing.T, evs []sseEvent, first int, names []string) {
	t.Helper()
	var got []string
	for i, ev := range evs {
		if ev.id != fmt.Sprint(first+i) {
			t.Fatalf("event %d has id %s, want %d (events %v)", i, ev.id, first+i, evs)
		}
		if !json.Valid([]byte(ev.data)) {
			t.Fatalf("event %s: data %q is not JSON", ev.id, ev.data)
		}
		got = append(got, ev.name)
	}
	if fmt.Sprint(got) != fmt.Sprint(names) {
		t.Fatalf("events %v, want %v", got, names)
	}
}

func (e *env) sendGo(id string) {
	e.t.Helper()
	e.do("POST", "/v1/namespaces/default/runs/"+id+"/events", "producer", map[string]any{"name": "go", "payload": "x"}).want(e.t, 204)
}

// TestStreamResumeWithLastEventID: a client that drops the connection mid-run
// and reconnects with Last-Event-ID gets every event exactly once, in order.
func TestStreamResumeWithLastEventID(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			if err := e.worker.Register(context.Background(), streamWF); err != nil {
				t.Fatal(err)
			}
			run := e.start("streamer", nil, nil)
			s := e.openStream(run.ID, "", "reader")
			var got []sseEvent
			for range 5 { // up to run.waiting: the run waits for "go"
				ev, ok := s.next(t)
				if !ok {
					t.Fatal("stream ended early")
				}
				got = append(got, ev)
			}
			s.close() // the client goes away mid-run
			e.sendGo(run.ID)
			e.waitRun(run.ID)
			// A reconnecting EventSource sends the same URL and Last-Event-ID.
			s = e.openStream(run.ID, "?after=1", "reader", "Last-Event-ID", got[len(got)-1].id)
			got = append(got, s.readAll(t)...)
			wantEvents(t, got, 1, streamNames)
			var done struct {
				Result string `json:"result"`
			}
			if err := json.Unmarshal([]byte(got[len(got)-1].data), &done); err != nil || done.Result != "done" {
				t.Fatalf("final event data %s: %v", got[len(got)-1].data, err)
			}
			// step.failed and step.completed: the step's name, the attempt, how
			// long it lasted and, for the failure, its error.
			for _, c := range []struct {
				ev      sseEvent
				attempt int
				err     string
			}{{got[7], 1, "first try fails"}, {got[8], 2, ""}} {
				var step struct {
					Name       string   `json:"name"`
					Attempt    int      `json:"attempt"`
					DurationMS *float64 `json:"duration_ms"`
					Error      *struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(c.ev.data), &step); err != nil || step.Name != "flaky" || step.Attempt != c.attempt ||
					step.DurationMS == nil || *step.DurationMS < float64(streamStepPause.Milliseconds()) || *step.DurationMS > 10_000 ||
					(c.err == "") != (step.Error == nil) || step.Error != nil && step.Error.Message != c.err {
					t.Fatalf("%s data %s (%v): want step flaky, attempt %d, duration_ms at least %d, error %q",
						c.ev.name, c.ev.data, err, c.attempt, streamStepPause.Milliseconds(), c.err)
				}
			}
			// The execution after the wait replayed the history (three emits
			// and the wait) as the run's second claim.
			if got[5].data != `{"attempt":2,"replayed":4}` {
				t.Fatalf("run.resumed data %s", got[5].data)
			}
			// A finished run's stream replays and ends; after= skips.
			wantEvents(t, e.openStream(run.ID, "", "reader").readAll(t), 1, streamNames)
			wantEvents(t, e.openStream(run.ID, "?after=8", "reader").readAll(t), 9, streamNames[8:])
			if evs := e.openStream(run.ID, "?after=now", "reader").readAll(t); len(evs) != 0 {
				t.Fatalf("after=now on a finished run: %v", evs)
			}
		})
	}
}

// TestStreamLiveAfterNow: after=now sends only the events saved after the
// stream opened, live, and ends after the final one; silent streams get
// keep-alive comments (the server's clock is a fake one: the test moves it
// past the heartbeat instead of waiting).
func TestStreamLiveAfterNow(t *testing.T) {
	const heartbeat = 7*time.Minute + 5*time.Second // no other timer of the server's
	clk := clock.NewFake(time.Now())
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.StreamHeartbeat, c.Clock = heartbeat, clk })
	if err := e.worker.Register(context.Background(), streamWF); err != nil {
		t.Fatal(err)
	}
	run := e.start("streamer", nil, nil)
	e.until(run.ID, func() bool {
		r, _ := e.worker.Get(context.Background(), run.ID)
		return r.Status == trellis.StatusWaiting
	})
	s := e.openStream(run.ID, "?after=now", "reader")
	// Silent: a keep-alive comment once the heartbeat passed, after which the
	// stream waits for the next one.
	waitTimerAt(t, clk, clk.Now().Add(heartbeat))
	clk.Advance(heartbeat)
	waitTimerAt(t, clk, clk.Now().Add(heartbeat))
	e.sendGo(run.ID)
	wantEvents(t, s.readAll(t), 6, streamNames[5:])
	if s.comments == 0 {
		t.Fatal("no keep-alive comment on a silent stream")
	}
}

// TestStreamEndsOnShutdown: an open stream ends when the server shuts down,
// and Shutdown does not wait for it.
func TestStreamEndsOnShutdown(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	if err := e.worker.Register(context.Background(), streamWF); err != nil {
		t.Fatal(err)
	}
	run := e.start("streamer", nil, nil)
	s := e.openStream(run.ID, "", "reader")
	for range 5 {
		if _, ok := s.next(t); !ok {
			t.Fatal("stream ended early")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a stream open: %v", err)
	}
	if _, ok := s.next(t); ok {
		t.Fatal("the stream went on after shutdown")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown took %v with a stream open", d)
	}
}

// TestStreamBadInput: a malformed cursor is a 400 problem; unknown runs 404;
// the route needs the reader role on the run's queue.
func TestStreamBadInput(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	run := e.start("echo", map[string]any{}, nil)
	e.waitRun(run.ID)
	path := "/v1/namespaces/default/runs/" + run.ID + "/stream"
	for _, q := range []string{"?after=abc", "?after=-1", "?after=1.5", "?after=1&after=2", "?bogus=1"} {
		e.do("GET", path+q, "reader", nil).problem(t, 400, "invalid_argument")
	}
	e.do("GET", path, "reader", nil, "Last-Event-ID", "x").problem(t, 400, "invalid_argument")
	e.do("GET", path+"?after=abc", "reader", nil, "Last-Event-ID", "3").problem(t, 400, "invalid_argument")
	e.do("GET", "/v1/namespaces/default/runs/nope/stream", "reader", nil).problem(t, 404, "run_not_found")
	e.do("GET", path, "", nil).problem(t, 401, "unauthenticated")
	e.do("GET", path, "other-reader", nil).problem(t, 403, "permission_denied")
	r := e.do("GET", path, "reader", nil).want(t, 200)
	if !strings.Contains(string(r.body), "event: run.succeeded") {
		t.Fatalf("finished run's stream: %s", r.body)
	}
}

// TestStreamOverHTTP2: where the connection cannot be taken over (HTTP/2), the
// stream is served in the request's handler, with the same events and end.
func TestStreamOverHTTP2(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.StreamHeartbeat = 20 * time.Millisecond })
	if err := e.worker.Register(context.Background(), streamWF); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(e.srv.Handler())
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	run := e.start("streamer", nil, nil)
	req, _ := http.NewRequest("GET", ts.URL+"/v1/namespaces/default/runs/"+run.ID+"/stream", nil)
	req.Header.Set("Authorization", "Bearer reader")
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.ProtoMajor != 2 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("answer %s %s", res.Proto, res.Header.Get("Content-Type"))
	}
	s := &sse{resp: res, sc: bufio.NewScanner(res.Body), cancel: func() { res.Body.Close() }}
	defer s.close()
	var got []sseEvent
	for range 5 {
		ev, ok := s.next(t)
		if !ok {
			t.Fatal("stream ended early")
		}
		got = append(got, ev)
	}
	time.Sleep(60 * time.Millisecond)
	e.sendGo(run.ID)
	got = append(got, s.readAll(t)...)
	wantEvents(t, got, 1, streamNames)
	if s.comments == 0 {
		t.Fatal("no keep-alive comment over HTTP/2")
	}
}

// TestStreamLimit: streams beyond MaxStreams are refused with 429; a stream that
// ended frees its place.
func TestStreamLimit(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.MaxStreams = 1 })
	if err := e.worker.Register(context.Background(), streamWF); err != nil {
		t.Fatal(err)
	}
	run := e.start("streamer", nil, nil)
	s := e.openStream(run.ID, "", "reader")
	path := "/v1/namespaces/default/runs/" + run.ID + "/stream"
	e.do("GET", path, "reader", nil).problem(t, 429, "rate_limited")
	s.close()
	e.sendGo(run.ID) // the run ends: its stream's last events are written, and it ends
	e.waitRun(run.ID)
	deadline := time.Now().Add(10 * time.Second)
	for e.srv.streams.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a closed stream kept its place")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.do("GET", path, "reader", nil).want(t, 200)
}

// streamHead opens a stream and returns its answer's status and head; the body
// of a 200 is left unread (the stream is closed), that of an error read.
func (e *env) streamHead(path, token string) *resp {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	r := &resp{status: res.StatusCode, header: res.Header}
	if res.StatusCode != 200 {
		r.body, _ = io.ReadAll(res.Body)
	}
	return r
}
