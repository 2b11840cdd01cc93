package trellis

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-dev/trellis/internal/httpc"
	"github.com/trellis-dev/trellis/internal/streams"
	"github.com/trellis-dev/trellis/store"
)

// StreamEvent is one event of a run's stream: what the workflow published with
// Emit, or a lifecycle event of the run (run.started, step.completed,
// step.failed, run.waiting, run.resumed, run.blocked, and the final
// run.succeeded, run.failed or run.cancelled). See docs/streams.md.
type StreamEvent struct {
	// Sequence numbers the run's events from 1, without gaps: the cursor to
	// resume after.
	Sequence int64  `json:"sequence"`
	Name     string `json:"name"`
	// Data is the event's JSON value.
	Data json.RawMessage `json:"data"`
	// At is when the event was saved (zero when read through a server, whose
	// events carry no time).
	At time.Time `json:"at,omitzero"`
}

// Final reports whether e is the run's last event (run.succeeded, run.failed
// or run.cancelled).
func (e *StreamEvent) Final() bool { return store.StreamFinal(e.Name) }

// StreamNow, as the after of Client.Stream, skips the events saved before the
// call: only new ones are delivered.
const StreamNow int64 = streams.Now

// Stream returns the events of run ref's stream after the sequence after (0:
// from the first; StreamNow: only new ones), in order, live: the iteration
// waits for new events and ends after the run's final event (a finished run's
// stream replays and ends). It ends early with an error (the run is unknown,
// the store or server fails) or when ctx ends (ctx's error), and when the loop
// breaks.
//
// Embedded, it reads the store from its cursor and waits for the store's
// wake-ups. Through a server it reads the server's event stream and, when the
// connection drops (the server restarts, a proxy cuts it), reconnects from the
// last sequence it delivered: every event is delivered once, in order.
//
// The call interceptors (Interceptor.Call, Method "Stream") wrap the whole
// iteration: next returns when it ends, with the error it ended with (nil when
// the run's final event was delivered or the loop broke). An error an
// interceptor returns instead reaches the loop last, unless the loop broke. An
// interceptor that calls next again after the loop broke gets nothing more
// delivered; next must not be called from two goroutines at once.
func (c *Client) Stream(ctx context.Context, ref string, after int64) iter.Seq2[*StreamEvent, error] {
	return func(yield func(*StreamEvent, error) bool) {
		var ended error
		stopped := false // the loop broke: yield may not be called again
		err := c.call(ctx, ClientCall{Method: "Stream", Ref: ref}, func(ctx context.Context) error {
			c.doStream(ctx, ref, after, func(ev *StreamEvent, err error) bool {
				if stopped { // next called again (a retrying interceptor) after the loop broke
					return false
				}
				ended = err
				stopped = !yield(ev, err)
				return !stopped
			})
			return ended
		})
		// An interceptor refused the call, or returned another error than the
		// one the stream ended with: the loop gets it, as a call's caller would.
		if err != nil && err != ended && !stopped {
			yield(nil, err)
		}
	}
}

// doStream is Stream without the call interceptors: it delivers the events to
// yield until yield returns false, the final event, or an error.
func (c *Client) doStream(ctx context.Context, ref string, after int64, yield func(*StreamEvent, error) bool) {
	if after < StreamNow {
		yield(nil, fmt.Errorf("%w: Stream: after must be a sequence or StreamNow, got %d", ErrInvalidParams, after))
		return
	}
	run, err := c.b.get(ctx, ref)
	if err != nil {
		yield(nil, err)
		return
	}
	c.b.stream(ctx, run.ID, after, yield)
}

// Reconnection of a remote stream: after a dropped connection it tries again at
// once, then backs off; streamRetries failures in a row end the iteration.
const (
	streamRetries     = 10
	streamBackoff     = 100 * time.Millisecond
	streamBackoffMax  = 3 * time.Second
	maxStreamLineSize = 64 << 20
)

// stream follows runID's event stream on the server, reconnecting from the last
// sequence delivered (Last-Event-ID).
func (r *remote) stream(ctx context.Context, runID string, after int64, yield func(*StreamEvent, error) bool) {
	failures, backoff := 0, streamBackoff
	for {
		if r.closed.Load() {
			yield(nil, ErrClosed)
			return
		}
		final, got, stop, err := r.streamOnce(ctx, runID, &after, yield)
		switch {
		case stop || final:
			return
		case ctx.Err() != nil:
			yield(nil, ctx.Err())
			return
		case err != nil:
			var re *RemoteError
			if errors.As(err, &re) && re.Status != http.StatusServiceUnavailable && re.Status != http.StatusTooManyRequests {
				yield(nil, err) // a refusal (unknown run, no permission, bad cursor): final
				return
			}
		case !got:
			// The server ended a stream that had nothing to send without a final
			// event: the run finished without one (it ended before streams
			// existed), or the server is shutting down. Ask which.
			run, gerr := r.get(ctx, runID)
			if gerr == nil && run.Status.Terminal() {
				return
			}
		}
		if got {
			failures, backoff = 0, streamBackoff
			continue // reconnect at once
		}
		failures++
		if failures >= streamRetries {
			if err == nil {
				err = fmt.Errorf("%w: the stream of run %s keeps ending", ErrUnavailable, runID)
			}
			yield(nil, err)
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			yield(nil, ctx.Err())
			return
		case <-t.C:
		}
		backoff = min(2*backoff, streamBackoffMax)
	}
}

// streamOnce reads one connection of the stream, delivering events after
// *after and advancing it. final: the run's final event was delivered; got:
// some event was; stop: the consumer stopped.
func (r *remote) streamOnce(ctx context.Context, runID string, after *int64, yield func(*StreamEvent, error) bool) (final, got, stop bool, err error) {
	q := url.Values{}
	h := http.Header{"Accept": {"text/event-stream"}}
	if *after == StreamNow {
		q.Set("after", "now")
	} else {
		h.Set("Last-Event-ID", strconv.FormatInt(*after, 10))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := r.hc.Open(ctx, httpc.Call{Method: http.MethodGet, Path: r.runPath(runID, "stream"), Query: q}, h)
	if err != nil {
		return false, false, false, remoteErr(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxStreamLineSize)
	var (
		ev   StreamEvent
		data bytes.Buffer
		seen bool // a field of the event being read
	)
	for sc.Scan() {
		line := sc.Text()
		if line == "" { // dispatch
			if seen && ev.Name != "" {
				e := ev
				e.Data = json.RawMessage(bytes.Clone(data.Bytes()))
				if e.Sequence > *after || *after == StreamNow {
					*after, got = e.Sequence, true
					if !yield(&e, nil) {
						return false, got, true, nil
					}
					if e.Final() {
						return true, got, false, nil
					}
				}
			}
			ev, seen = StreamEvent{}, false
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		seen = true
		switch field {
		case "id":
			n, perr := strconv.ParseInt(value, 10, 64)
			if perr != nil {
				return false, got, false, fmt.Errorf("%w: stream of run %s: bad event id %q", ErrUnavailable, runID, value)
			}
			ev.Sequence = n
		case "event":
			ev.Name = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return false, got, false, fmt.Errorf("%w: reading the stream of run %s: %v", ErrUnavailable, runID, err)
	}
	return false, got, false, nil
}
