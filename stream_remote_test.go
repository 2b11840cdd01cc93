package trellis_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/pgtest"
)

// Streams of runs that remote workers advance: the events reach the server's
// stream route through the worker protocol's checkpoints, whichever server
// the worker is connected to.

// wireEvent is an event as an SSE client reads it off the wire.
type wireEvent struct {
	id, name, data string
}

// readSSE reads the stream route of run id at base as an EventSource does,
// from the first event, calling each for every event, until the server ends
// the stream (after the run's final event). It fails the test when the route
// does not answer an event stream or the stream breaks.
func readSSE(t *testing.T, ctx context.Context, base, token, id string, each func(wireEvent)) []wireEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/namespaces/default/runs/"+id+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream of %s: %d %s", id, res.StatusCode, res.Header.Get("Content-Type"))
	}
	var evs []wireEvent
	var ev wireEvent
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && ev.name != "":
			evs = append(evs, ev)
			each(ev)
			ev = wireEvent{}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data += line[6:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("stream of %s broke after %v: %v", id, evs, err)
	}
	return evs
}

// checkWire checks that evs are streamWF's events, each once, in order,
// numbered 1, 2, ... without gaps, ending with its final event.
func checkWire(t *testing.T, evs []wireEvent) {
	t.Helper()
	var names []string
	for i, ev := range evs {
		if ev.id != strconv.Itoa(i+1) {
			t.Fatalf("event %d (%s) has id %s, want %d: %v", i, ev.name, ev.id, i+1, evs)
		}
		if !json.Valid([]byte(ev.data)) {
			t.Fatalf("event %s: data %q is not JSON", ev.id, ev.data)
		}
		names = append(names, ev.name)
	}
	wantNames(t, names, streamWFNames)
	if last := evs[len(evs)-1]; last.data != `{"result":"done"}` {
		t.Fatalf("final event %s %s", last.name, last.data)
	}
	if !strings.Contains(evs[7].data, `"name":"flaky","attempt":1`) || !strings.Contains(evs[7].data, `"duration_ms":`) {
		t.Fatalf("step.failed data %s", evs[7].data)
	}
}

// streamThroughRemoteWorker starts streamWF through producer (a client of a
// server) and reads its stream on the stream route of watchBase: at
// run.waiting it sends the event the run waits for, so the rest of the stream
// is live.
func streamThroughRemoteWorker(t *testing.T, producer *trellis.Client, watchBase, readerToken string) []wireEvent {
	t.Helper()
	ctx := ctxT(t)
	run, err := producer.StartRaw(ctx, "stream-wf", []byte("null"), trellis.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return readSSE(t, ctx, watchBase, readerToken, run.ID, func(ev wireEvent) {
		if ev.name == "run.waiting" {
			if err := producer.SendEvent(ctx, run.ID, "go", "x"); err != nil {
				t.Errorf("sending go: %v", err)
			}
		}
	})
}

// TestStreamRemoteWorker: a remote worker's Emit and the run's lifecycle
// reach an SSE client of the server the worker is connected to, each once, in
// order, until the final event.
func TestStreamRemoteWorker(t *testing.T) {
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			s := newWorkerServer(t, url(t))
			wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
			ptok := s.token(t, "p", auth.Grant{Role: auth.RoleProducer, Namespace: "default"})
			rtok := s.token(t, "r", auth.Grant{Role: auth.RoleReader, Namespace: "default"})
			startRemoteWorker(t, s.base, wtok, streamWF)
			producer := remoteClientWith(t, s.base, ptok)
			checkWire(t, streamThroughRemoteWorker(t, producer, s.base, rtok))
		})
	}
}

// TestStreamRemoteWorkerAcrossServers: two servers share one Postgres, each
// with its own store; a remote worker connected to server A runs a workflow
// that emits; an SSE client of server B's stream route receives every event
// (emitted and lifecycle) once, in order, until the final event. What B learns
// of A's commits comes through Postgres (NOTIFY), not through a store of B's
// that a worker writes to.
func TestStreamRemoteWorkerAcrossServers(t *testing.T) {
	url := pgtest.SchemaURL(t)
	a, b := newWorkerServer(t, url), newWorkerServer(t, url)
	wtok := a.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	ptok := a.token(t, "p", auth.Grant{Role: auth.RoleProducer, Namespace: "default"})
	rtok := a.token(t, "r", auth.Grant{Role: auth.RoleReader, Namespace: "default"})
	startRemoteWorker(t, a.base, wtok, streamWF) // the only worker: connected to A
	producer := remoteClientWith(t, a.base, ptok)
	checkWire(t, streamThroughRemoteWorker(t, producer, b.base, rtok))
}

// remoteClientWith is a client of the server at base with token.
func remoteClientWith(t *testing.T, base, token string) *trellis.Client {
	t.Helper()
	c, err := trellis.Open(context.Background(), trellis.Config{Server: base, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
