package trellis

import (
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/engine"
)

// ErrEventTimeout: a wait for an event ended at its timeout without one.
var ErrEventTimeout = engine.ErrEventTimeout

// EventFuture is a wait for the next event of one name sent to the run.
type EventFuture[T any] struct {
	w    engine.EventWait
	name string
}

// OnEvent starts waiting for the next event named name (see Client.SendEvent); a
// timeout above zero ends the wait with ErrEventTimeout. Events that arrived
// before are in the run's inbox: each is delivered once, oldest first per name.
func OnEvent[T any](wc *Context, name string, timeout time.Duration) *EventFuture[T] {
	f := &EventFuture[T]{name: name}
	wc.rs.OnEvent(&f.w, name, timeout)
	return f
}

// WaitEvent waits for the next event named name and returns its payload,
// decoded; see OnEvent. The run holds no worker while it waits.
func WaitEvent[T any](wc *Context, name string, timeout time.Duration) (T, error) {
	return OnEvent[T](wc, name, timeout).Get(wc)
}

// Get waits for the event and returns its payload, or ErrEventTimeout,
// ErrCancelled or ErrDeadlineExceeded.
func (f *EventFuture[T]) Get(wc *Context) (T, error) {
	var v T
	if err := wc.rs.Await(&f.w, wc.detached); err != nil {
		return v, err
	}
	op := f.w.Op()
	if op.Error != nil {
		return v, fmt.Errorf("%w %q", ErrEventTimeout, f.name)
	}
	if err := wc.rs.Codec().Unmarshal(op.Result, &v); err != nil {
		return v, fmt.Errorf("decoding event %q: %w", f.name, err)
	}
	return v, nil
}

func (f *EventFuture[T]) waiterOf() engine.Waiter { return &f.w }
