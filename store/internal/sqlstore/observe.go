package sqlstore

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// CommitObserver holds the functions a store reports its batched commits to
// (store.CommitObserver). The zero value observes nothing, at no cost.
type CommitObserver struct {
	mu      sync.Mutex                                 // serializes Add and its removes
	entries []*func(int, time.Duration)                // the observers added, by identity
	fs      atomic.Pointer[[]func(int, time.Duration)] // what Done calls; nil: none
}

// Add adds an observer: every function added is called after every batch,
// until remove.
func (o *CommitObserver) Add(f func(requests int, elapsed time.Duration)) (remove func()) {
	entry := &f // identifies this addition: funcs do not compare
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries = append(slices.Clone(o.entries), entry)
	o.publish()
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.entries = slices.DeleteFunc(slices.Clone(o.entries), func(e *func(int, time.Duration)) bool { return e == entry })
		o.publish()
	}
}

// publish makes the entries the observers Done calls; o.mu is held.
func (o *CommitObserver) publish() {
	if len(o.entries) == 0 {
		o.fs.Store(nil)
		return
	}
	fs := make([]func(requests int, elapsed time.Duration), len(o.entries))
	for i, e := range o.entries {
		fs[i] = *e
	}
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
