package sqlstore

import (
	"sync"
	"sync/atomic"
	"time"
)

// CommitObserver holds the functions a store reports its batched commits to
// (store.CommitObserver). The zero value observes nothing, at no cost.
type CommitObserver struct {
	mu sync.Mutex // serializes Add
	fs atomic.Pointer[[]func(requests int, elapsed time.Duration)]
}

// Add adds an observer: every function added is called after every batch.
func (o *CommitObserver) Add(f func(requests int, elapsed time.Duration)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var fs []func(requests int, elapsed time.Duration)
	if old := o.fs.Load(); old != nil {
		fs = append(fs, *old...)
	}
	fs = append(fs, f)
	o.fs.Store(&fs)
}

// Start returns the start time of a batch, zero when nobody observes.
func (o *CommitObserver) Start() time.Time {
	if o.fs.Load() == nil {
		return time.Time{}
	}
	return time.Now() // wall time: a latency, not a record's time
}

// Done reports a batch of n requests started at t0 (by Start).
func (o *CommitObserver) Done(n int, t0 time.Time) {
	if t0.IsZero() {
		return
	}
	if fs := o.fs.Load(); fs != nil {
		d := time.Since(t0)
		for _, f := range *fs {
			f(n, d)
		}
	}
}
