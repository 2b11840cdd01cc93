package trellis

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"

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
			c.stream(ctx, ref, after, func(ev *StreamEvent, err error) bool {
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

// stream is Stream without the call interceptors: it delivers the events to
// yield until yield returns false, the final event, or an error.
func (c *Client) stream(ctx context.Context, ref string, after int64, yield func(*StreamEvent, error) bool) {
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
