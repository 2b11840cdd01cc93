package trellis

import (
	"time"

	"github.com/trellis-dev/trellis/internal/engine"
)

// Timer is a durable timer: it fires at a time recorded when it was created, and
// a run waiting for it holds no worker (see Context.Sleep).
type Timer struct {
	t engine.Timer
}

// NewTimer starts a durable timer that fires d from now (now as recorded).
func (wc *Context) NewTimer(d time.Duration) *Timer {
	t := &Timer{}
	wc.rs.NewTimer(&t.t, func(now time.Time) time.Time { return now.Add(d) })
	return t
}

// NewTimerAt starts a durable timer that fires at t.
func (wc *Context) NewTimerAt(at time.Time) *Timer {
	t := &Timer{}
	wc.rs.NewTimer(&t.t, func(time.Time) time.Time { return at })
	return t
}

// At returns when the timer fires.
func (t *Timer) At() time.Time { return t.t.At() }

// Wait blocks until the timer fires. While it waits for more than
// Worker.MaxInlineBackoff the run is released (status waiting) and resumed by
// any worker when due. It returns ErrCancelled or ErrDeadlineExceeded when the
// run is cancelled or reaches its deadline first.
func (t *Timer) Wait(wc *Context) error { return wc.rs.Await(&t.t, wc.detached) }

// Sleep waits d durably: see Timer.Wait.
func (wc *Context) Sleep(d time.Duration) error { return wc.NewTimer(d).Wait(wc) }

// SleepUntil waits until t durably: see Timer.Wait.
func (wc *Context) SleepUntil(t time.Time) error { return wc.NewTimerAt(t).Wait(wc) }

// Selectable is a future Select can wait for: *Future (an async step), *Timer,
// *EventFuture, *ChildFuture, *ApprovalFuture.
type Selectable interface {
	waiterOf() engine.Waiter
}

func (t *Timer) waiterOf() engine.Waiter { return &t.t }

// Select waits for whichever of cases is ready first and returns its index; when
// several are ready, the earliest in cases wins. The choice is recorded, so a
// replay makes the same one. Then call the winner's Get or Wait to take its
// value; the others stay usable. A run waiting only on timers, events, approvals
// and children holds no worker. While an async step among cases is running here,
// the run waits in this worker: events and children are seen once it finishes.
func Select(wc *Context, cases ...Selectable) (int, error) {
	ws := make([]engine.Waiter, len(cases))
	for i, c := range cases {
		ws[i] = c.waiterOf()
	}
	return wc.rs.Select(ws, wc.detached)
}
