package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/testport"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeremote"
)

var sigtermEcho = trellis.NewWorkflow("sigterm-echo", func(wc *trellis.Context, in string) (string, error) {
	return trellis.Step(wc, "echo", func(context.Context) (string, error) { return in, nil })
})

// A `trellis server` process sent SIGTERM while it has a long poll, a claim
// stream of a remote worker and a start whose body is still arriving in
// flight: the long poll is answered at once (202, the run as it is), the
// claim stream ends telling the worker to reconnect, new connections are
// refused while the start goes on, the start is answered 201 once its body is
// in, and the process exits with status 0. Restarted on the same address, the
// server has the run that start created, and a remote worker that was
// connected to the first process runs it and new runs.
func TestServerSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real server processes")
	}
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	addr, pprofAddr := testport.Addr(t), testport.Addr(t)
	args := []string{"--store", url, "--listen", addr, "--insecure"}
	srv := startTrellisServer(t, slices.Concat(args, []string{"--pprof", pprofAddr})...)
	base := srv.base()

	w, err := trellis.NewWorker(ctxT(t), trellis.Config{Server: base})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Client().Close()
	if err := w.Register(ctxT(t), sigtermEcho); err != nil {
		t.Fatal(err)
	}
	c := w.Client()
	echo(t, c, "before")

	probe, claimEnded := openClaimStream(t, c, base)
	polled := longPoll(t, base, probe)
	waitFor(t, "the long poll in its handler", 30*time.Second, func() bool {
		return strings.Contains(goroutines(t, pprofAddr), "server.(*Server).getResult")
	})
	start := startSlowly(t, addr, `{"workflow":"sigterm-echo","id":"in-flight","input":"during"}`)

	srv.signal(t, syscall.SIGTERM)
	select {
	case r := <-polled:
		var run trellis.Run
		if r.err != nil || r.status != http.StatusAccepted || json.Unmarshal(r.body, &run) != nil ||
			run.ID != probe || run.Status.Terminal() {
			t.Fatalf("the long poll in flight got %d %s (%v), want 202 and the run as it is", r.status, r.body, r.err)
		}
	case <-time.After(20 * time.Second): // well under its wait (50s)
		t.Fatal("the long poll in flight was not answered within 20s of SIGTERM")
	}
	select {
	case r := <-claimEnded:
		if r.err != nil || !r.reconnect {
			t.Fatalf("the claim stream ended with reconnect %v, err %v; want the worker told to reconnect", r.reconnect, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the claim stream was not ended within 20s of SIGTERM")
	}
	waitFor(t, "new connections refused", 20*time.Second, func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return false
		}
		if errors.Is(err, syscall.ECONNRESET) {
			// Accepted into the listener's backlog just before it closed, then
			// reset with it: the next dial finds it closed.
			return false
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dialling the stopping server: %v, want connection refused", err)
		}
		return true
	})
	if srv.exited() {
		t.Fatal("the server exited with a start in flight")
	}
	run := start.finish(t)
	if run.WorkflowID != "in-flight" {
		t.Fatalf("the start in flight answered %+v", run)
	}
	if code := srv.wait(t, 20*time.Second); code != 0 { // a bound for a hang, under the 30s grace
		t.Fatalf("the server exited with status %d after SIGTERM; it printed:\n%s", code, srv.stdout())
	}
	contains(t, "the server's output", srv.stdout(), "trellis server stopping")

	startTrellisServer(t, args...) // the worker reconnects to it
	if got, err := c.Wait(ctxT(t), run.ID); err != nil || got.Status != trellis.StatusSucceeded || string(got.Output) != `"during"` {
		t.Fatalf("the run started during shutdown: %+v, %v", got, err)
	}
	echo(t, c, "after")
}

// echo runs sigterm-echo with v through the server and checks its result.
func echo(t *testing.T, c *trellis.Client, v string) {
	t.Helper()
	h, err := trellis.Start(ctxT(t), c, sigtermEcho, v)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.Result(ctxT(t)); err != nil || got != v {
		t.Fatalf("echo %q: %q, %v", v, got, err)
	}
}

type claimEnd struct {
	reconnect bool
	err       error
}

// openClaimStream opens a Claim stream of the worker protocol for workflow
// sigterm-probe, as a remote worker does, and returns once the server has
// pushed a run into it (so the stream is open there): that run's ID, and
// where the stream's end is sent.
func openClaimStream(t *testing.T, c *trellis.Client, base string) (string, <-chan claimEnd) {
	t.Helper()
	rs, err := storeremote.New(storeremote.Config{URL: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	pushed := make(chan string, 2)
	ended := make(chan claimEnd, 1)
	go func() {
		reconnect, err := rs.ClaimPush(context.Background(), &store.RunsClaimParams{Namespace: "default",
			Workflows: []string{"sigterm-probe"}, Worker: "probe", Max: 2, LeaseDuration: time.Minute},
			2*time.Minute, func(cr *store.ClaimedRun) { pushed <- cr.Run.ID })
		ended <- claimEnd{reconnect, err}
	}()
	run, err := c.StartRaw(ctxT(t), "sigterm-probe", nil, trellis.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-pushed:
		if id != run.ID {
			t.Fatalf("the claim stream got run %s, want %s", id, run.ID)
		}
	case r := <-ended:
		t.Fatalf("the claim stream ended before a run was pushed: %+v", r)
	case <-time.After(30 * time.Second):
		t.Fatal("no run pushed into the claim stream within 30s")
	}
	return run.ID, ended
}

type polledResult struct {
	status int
	body   []byte
	err    error
}

// longPoll waits for the result of run (which nobody runs) with a wait of
// 50s, in the background.
func longPoll(t *testing.T, base, run string) <-chan polledResult {
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	out := make(chan polledResult, 1)
	go func() {
		res, err := hc.Get(base + "/v1/namespaces/default/runs/" + run + "/result?wait=50s")
		if err != nil {
			out <- polledResult{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		out <- polledResult{status: res.StatusCode, body: b, err: err}
	}()
	return out
}

// goroutines returns the goroutine profile of the process serving pprof at addr.
func goroutines(t *testing.T, addr string) string {
	t.Helper()
	res, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// slowStart is a start whose headers the server has and whose body it is
// reading: half of it is sent.
type slowStart struct {
	conn net.Conn
	rd   *bufio.Reader
	rest string
}

// startSlowly sends a start's headers asking to be told to continue, waits
// for the server's 100 Continue (its handler is reading the body), and sends
// half of body.
func startSlowly(t *testing.T, addr, body string) *slowStart {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(60 * time.Second)) // a bound for a broken server, not a measurement
	head := fmt.Sprintf("POST /v1/namespaces/default/runs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", addr, len(body))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	res, err := http.ReadResponse(rd, nil)
	if err != nil || res.StatusCode != http.StatusContinue {
		t.Fatalf("waiting for 100 Continue: %+v, %v", res, err)
	}
	half := len(body) / 2
	if _, err := io.WriteString(conn, body[:half]); err != nil {
		t.Fatal(err)
	}
	return &slowStart{conn: conn, rd: rd, rest: body[half:]}
}

// finish sends the rest of the body and returns the run the server answered
// with 201.
func (s *slowStart) finish(t *testing.T) *trellis.Run {
	t.Helper()
	if _, err := io.WriteString(s.conn, s.rest); err != nil {
		t.Fatalf("sending the rest of the body: %v", err)
	}
	res, err := http.ReadResponse(s.rd, nil)
	if err != nil {
		t.Fatalf("the start in flight got no answer: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var run trellis.Run
	if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &run) != nil {
		t.Fatalf("the start in flight got %d %s, want 201 and the run", res.StatusCode, b)
	}
	return &run
}
