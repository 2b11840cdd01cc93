package storetest

import (
	"sync"
	"time"
)

// Clock is a settable fake clock, safe for concurrent use. It reads whole microseconds,
// the finest precision every driver stores (Postgres keeps microseconds), so a time
// written and read back compares equal.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading start, truncated to the microsecond.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start.Truncate(time.Microsecond)}
}

// Now returns the clock's current time. Pass the method value as a driver's clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, truncated to the microsecond, and returns the
// new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d.Truncate(time.Microsecond))
	return c.now
}

// Set sets the clock to t, truncated to the microsecond.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.Truncate(time.Microsecond)
}
