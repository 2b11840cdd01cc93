package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// waitRunsRequests reads how many GET runs:wait the server answered 200 from
// its metrics (a batch refused, such as for a wait above the server's
// --max-wait, does not count).
func (e *remoteEnv) waitRunsRequests(t *testing.T) int {
	t.Helper()
	req, _ := http.NewRequest("GET", e.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "trellis_api_requests_total{") && strings.Contains(line, `route="waitRuns"`) && strings.Contains(line, `code="200"`) {
			var v int
			fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%d", &v)
			n += v
		}
	}
	return n
}

// waitRunsRequestsSince is waitRunsRequests less before, once it is above 0
// or after 5 s: the server counts a request when its handler has returned,
// which may come after the client read the last run of its answer (and its
// caller returned), so a count read at once may miss the last batch.
func (e *remoteEnv) waitRunsRequestsSince(t *testing.T, before int) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got := e.waitRunsRequests(t) - before; got > 0 || time.Now().After(deadline) {
			return got
		}
	}
}

// startWaiting starts n runs of remoteEvent through c and returns their
// handles once each waits for its event.
func startWaiting(t *testing.T, c *trellis.Client, n int) []*trellis.Handle[string] {
	t.Helper()
	handles := make([]*trellis.Handle[string], n)
	for i := range handles {
		handles[i] = must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, remoteEvent, nil))
	}
	for _, h := range handles {
		waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
	}
	return handles
}

// awaitEach calls every handle's Result at once, sends run i the event "go"
// with payload "go i" once the waits have had time to queue (and be batched),
// and fails the test unless each caller got its own run's payload.
func awaitEach(t *testing.T, c *trellis.Client, handles []*trellis.Handle[string]) {
	t.Helper()
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, len(handles))
	for i, h := range handles {
		wg.Go(func() {
			out, err := h.Result(ctx)
			if err == nil && out != fmt.Sprintf("go %d", i) {
				err = fmt.Errorf("run %d got %q", i, out)
			}
			errs <- err
		})
	}
	time.Sleep(100 * time.Millisecond) // the waits beyond four queue and go as batches
	for i, h := range handles {
		if err := c.SendEvent(ctx, h.RunID(), "go", fmt.Sprintf("go %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemoteResultsBatched: many Handle.Result calls at once through a server
// go as GET runs:wait batches, and each caller gets its own run, as it ends;
// a run deleted meanwhile fails its caller alone with ErrRunNotFound, a
// caller that gives up returns at once, and Close fails the waits queued.
func TestRemoteResultsBatched(t *testing.T) {
	e := newRemoteEnv(t)
	ctx := ctxT(t)
	const n = 40
	handles := startWaiting(t, e.client, n)
	before := e.waitRunsRequests(t)
	awaitEach(t, e.client, handles)
	if got := e.waitRunsRequestsSince(t, before); got == 0 || got > n/2 {
		t.Fatalf("%d waits went as %d runs:wait requests, want batches", n, got)
	}

	// Four waits alone hold the slots; the next ones are batched.
	var wg sync.WaitGroup
	held := make([]*trellis.Handle[string], 4)
	for i := range held {
		held[i] = must[*trellis.Handle[string]](t)(trellis.Start(ctx, e.client, remoteEvent, nil))
		waitStatus(t, e.client, held[i].RunID(), trellis.StatusWaiting)
		wg.Go(func() {
			if _, err := held[i].Result(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	gone := must[*trellis.Handle[map[string]any]](t)(trellis.Start(ctx, e.client, remoteEcho, map[string]any{"x": 1}))
	must[*trellis.Run](t)(e.client.Wait(ctx, gone.RunID()))
	if err := e.client.Delete(ctx, gone.RunID()); err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Result(ctx); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("Result of a deleted run = %v, want ErrRunNotFound", err)
	}
	late := must[*trellis.Handle[string]](t)(trellis.Start(ctx, e.client, remoteEvent, nil))
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	t0 := time.Now()
	if _, err := late.Result(cctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 5*time.Second {
		t.Fatalf("Result past its context = %v after %s", err, time.Since(t0))
	}
	cancel()
	for _, h := range append(held, late) {
		if err := e.client.SendEvent(ctx, h.RunID(), "go", "done"); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()

	// Close: a batched wait ends with ErrClosed.
	c := e.open(t, e.token)
	waiting := must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, remoteEvent, nil))
	waitStatus(t, c, waiting.RunID(), trellis.StatusWaiting)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	for range 4 {
		wg.Go(func() { _, _ = waiting.Result(wctx) }) // the four alone
	}
	time.Sleep(50 * time.Millisecond)
	closed := make(chan error, 1)
	go func() {
		_, err := waiting.Result(ctx)
		closed <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; !errors.Is(err, trellis.ErrClosed) {
		t.Fatalf("a batched wait at Close = %v, want ErrClosed", err)
	}
	wcancel()
	wg.Wait()
}

// TestRemoteResultsBeforeRunsWait: against a server without runs:wait (404,
// as one from before it answers), batched waits fall back to one long poll
// each, and every caller still gets its run.
func TestRemoteResultsBeforeRunsWait(t *testing.T) {
	e := newRemoteEnv(t)
	target, err := url.Parse(e.base)
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/runs:wait") {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"type":"about:blank","title":"Not found","status":404,"detail":"no such route","code":"not_found"}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer old.Close()
	c, err := trellis.Open(t.Context(), trellis.Config{Server: old.URL, Token: e.token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	awaitEach(t, c, startWaiting(t, c, 12))
	// One batch, or two when the second gathered before the first was
	// refused; then every wait goes alone.
	if got := refused.Load(); got < 1 || got > 2 {
		t.Fatalf("%d batches tried, want 1 or 2", got)
	}
}
