package clock

import (
	"slices"
	"sync"
	"time"
)

// Fake is a clock that moves only when told to (Advance, Set). Moving it fires, in
// time order, every timer that is due, so code sleeping through a Fake wakes as if
// the time had passed. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced when a timer is added
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now implements Clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer implements Clock.
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc implements Clock.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	t.Reset(d)
	return t
}

// Advance moves the clock d forward and fires the timers due by then.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the clock to t (never backwards) and fires the timers due by then.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	if t.After(f.now) {
		f.now = t
	}
	now := f.now
	var due []*fakeTimer
	f.timers = slices.DeleteFunc(f.timers, func(ft *fakeTimer) bool {
		if ft.at.After(now) {
			return false
		}
		due = append(due, ft)
		return true
	})
	// Sorted under the lock: a timer's time is written by Reset, which its
	// owner may call (woken by something else) as soon as the lock is free.
	slices.SortStableFunc(due, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	f.mu.Unlock()
	for _, ft := range due {
		ft.fire(now)
	}
}

// Timers returns how many timers are waiting to fire.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// Next returns when the earliest waiting timer fires, and false when none waits.
func (f *Fake) Next() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.timers) == 0 {
		return time.Time{}, false
	}
	next := f.timers[0].at
	for _, t := range f.timers[1:] {
		if t.at.Before(next) {
			next = t.at
		}
	}
	return next, true
}

// TimerAt reports whether a timer waits to fire at at: a test knows that
// code has armed (or reset) the timer it means before it advances the clock.
func (f *Fake) TimerAt(at time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.timers, func(t *fakeTimer) bool { return t.at.Equal(at) })
}

// TimerAdded returns a channel closed the next time a timer is started or reset,
// so that a test can wait for code to reach a sleep before it advances the clock.
func (f *Fake) TimerAdded() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	ch chan time.Time
	fn func()
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.timers)
	f.timers = slices.DeleteFunc(f.timers, func(x *fakeTimer) bool { return x == t })
	if t.ch != nil { // no stale value after Stop, as with time.Timer since Go 1.23
		select {
		case <-t.ch:
		default:
		}
	}
	return len(f.timers) < n
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	active := t.Stop()
	f := t.f
	f.mu.Lock()
	t.at = f.now.Add(d)
	if d <= 0 {
		now := f.now
		f.mu.Unlock()
		t.fire(now)
		return active
	}
	f.timers = append(f.timers, t)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	return active
}

func (t *fakeTimer) fire(now time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	select { // a timer's channel holds one value, as time.Timer's does
	case <-t.ch:
	default:
	}
	t.ch <- now
}
