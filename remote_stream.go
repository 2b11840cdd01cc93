package trellis

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-dev/trellis/internal/httpc"
)

// The remote backend's event streams: Client.Stream through a server, over
// its text/event-stream route, reconnecting from the last sequence delivered.

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
