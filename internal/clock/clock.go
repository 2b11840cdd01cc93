// Package clock is the one clock of a Trellis process: the engine, the worker's
// claim loop and heartbeats, durable timers, in-place sleeps and retry backoffs all
// read the time and wait through it. Real is the wall clock; Fake is a clock a test
// moves by hand, which fires every timer that comes due.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d has passed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f on its own goroutine once d has passed, unless stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer of a Clock, used as a time.Timer is (Go 1.23 semantics: Stop and
// Reset need no draining of the channel).
type Timer interface {
	// C is the channel the time is sent on; nil for a timer of AfterFunc.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped it.
	Stop() bool
	// Reset makes the timer fire d from now; it reports whether it was active.
	Reset(d time.Duration) bool
}

// Real is the wall clock.
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// NewTimer implements Clock.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc implements Clock.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Or returns c, or the real clock when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// WithNow returns a clock that reads the time from now and waits on wall-clock
// timers: the form of a plain time function (Config.Now).
func WithNow(now func() time.Time) Clock { return nowClock{now: now} }

type nowClock struct {
	Real
	now func() time.Time
}

func (c nowClock) Now() time.Time { return c.now() }
