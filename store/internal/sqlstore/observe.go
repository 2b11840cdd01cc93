package sqlstore

import (
	"sync/atomic"
	"time"
)

// CommitObserver holds the function a store reports its batched commits to
// (store.CommitObserver). The zero value observes nothing, at no cost.
type CommitObserver struct {
	f atomic.Pointer[func(requests int, elapsed time.Duration)]
}

// Set replaces the observer.
func (o *CommitObserver) Set(f func(requests int, elapsed time.Duration)) { o.f.Store(&f) }

// Start returns the start time of a batch, zero when nobody observes.
func (o *CommitObserver) Start() time.Time {
	if o.f.Load() == nil {
		return time.Time{}
	}
	return time.Now() // wall time: a latency, not a record's time
}

// Done reports a batch of n requests started at t0 (by Start).
func (o *CommitObserver) Done(n int, t0 time.Time) {
	if t0.IsZero() {
		return
	}
	if f := o.f.Load(); f != nil {
		(*f)(n, time.Since(t0))
	}
}
