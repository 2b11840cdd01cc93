package trellistest

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// TB is the part of testing.TB the kit uses; *testing.T and *testing.B
// implement it.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(f func())
	TempDir() string
}

// DefaultStart is the time a test environment's fake clock reads at first.
var DefaultStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Options configure New. Zero fields take the documented defaults.
type Options struct {
	// Workflows are registered with the client at once (see also Env.Register).
	Workflows []trellis.Registrable
	// Steps replace steps' functions by step name, as Env.OverrideStep does.
	Steps map[string]any
	// Start is the time the fake clock reads at first; default DefaultStart.
	Start time.Time
	// Namespace of the client; default "default".
	Namespace string
	// Codec of the client; default trellis.JSONCodec.
	Codec trellis.Codec
	// Logger receives the engine's logs; default discards them.
	Logger *slog.Logger
	// Timeout bounds, in wall time, each wait of the kit (for runs to settle,
	// for a status, for a result); default 10s. A wait that exceeds it fails
	// the test.
	Timeout time.Duration
}

// leaseDuration is long enough that no move of the fake clock in a test expires
// the lease of a run executing meanwhile (its heartbeats follow the same clock).
const leaseDuration = 30 * 24 * time.Hour

// Env is a trellis.Client on a temporary SQLite store, with a worker, whose clock
// is a fake that moves only when the test moves it. Create it with New; it is
// closed when the test ends.
type Env struct {
	t       TB
	c       *trellis.Client
	clk     *clock.Fake
	timeout time.Duration

	mu    sync.Mutex
	steps map[string]any
}

// New opens a test environment: a client with its worker on a SQLite file in
// t.TempDir(), a fake clock, the workflows and step overrides of o. Every sleep
// and retry backoff waits in the store (none in place), so that it ends only
// when the test moves the clock (Advance, or Result, which skips time).
func New(t TB, o Options) *Env {
	t.Helper()
	if o.Start.IsZero() {
		o.Start = DefaultStart
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	e := &Env{t: t, clk: clock.NewFake(o.Start), timeout: o.Timeout, steps: map[string]any{}}
	for name, fn := range o.Steps {
		e.OverrideStep(name, fn)
	}
	cfg := trellis.Config{
		Store:     storesqlite.URL(filepath.Join(t.TempDir(), "trellis.db")), // a test's name may hold '#'
		Namespace: o.Namespace, Codec: o.Codec, Logger: o.Logger,
		Clock: e.clk, StepOverride: e.stepOverride,
	}
	cfg.Worker.MaxInlineBackoff = time.Nanosecond
	cfg.Worker.LeaseDuration = leaseDuration
	c, err := trellis.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("trellistest: opening the client: %v", err)
	}
	e.c = c
	t.Cleanup(e.close)
	e.Register(o.Workflows...)
	return e
}

// close closes the client, moving the fake clock on so that the worker's
// shutdown grace and any step abandoned on its context end.
func (e *Env) close() {
	done := make(chan error, 1)
	go func() { done <- e.c.Close() }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(e.timeout)
	for {
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("trellistest: closing the client: %v", err)
			}
			return
		case <-tick.C:
			e.clk.Advance(time.Second)
		case <-deadline:
			e.t.Errorf("trellistest: the client did not close within %s", e.timeout)
			return
		}
	}
}

// Client returns the environment's client.
func (e *Env) Client() *trellis.Client { return e.c }

// Clock returns the fake clock, for code under test that takes a trellis.Clock.
// Move it with Advance or AdvanceTo.
func (e *Env) Clock() trellis.Clock { return e.clk }

// Now returns the time of the fake clock.
func (e *Env) Now() time.Time { return e.clk.Now() }

// Register registers workflows with the client.
func (e *Env) Register(wfs ...trellis.Registrable) {
	e.t.Helper()
	if len(wfs) == 0 {
		return
	}
	ctx, cancel := e.ctx()
	defer cancel()
	if err := e.c.Register(ctx, wfs...); err != nil {
		e.t.Fatalf("trellistest: %v", err)
	}
}

// Advance waits until the runs have settled (Settle), moves the fake clock d
// forward, and waits until the runs woken by that have settled again: timers,
// event and approval timeouts and retry backoffs due by then have run.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	e.AdvanceTo(e.clk.Now().Add(d))
}

// AdvanceTo is Advance to the time t (the clock never goes back).
func (e *Env) AdvanceTo(t time.Time) {
	e.t.Helper()
	e.Settle()
	e.clk.Set(t)
	e.Settle()
}

// ctx is a context bounded by the environment's timeout.
func (e *Env) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.timeout)
}

func (e *Env) fatalf(format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("trellistest: "+format, args...)
}

// Settle waits until no run of the namespace is executing or due: every run is
// finished, blocked, or waiting for a time still ahead of the fake clock, an
// event or an approval.
func (e *Env) Settle() {
	e.t.Helper()
	deadline := time.Now().Add(e.timeout)
	for {
		r, err := e.busyRun()
		if err != nil {
			e.fatalf("listing runs: %v", err)
		}
		if r == nil {
			return
		}
		if time.Now().After(deadline) {
			e.fatalf("run %s (%s) is still %s after %s: %s", r.ID, r.Workflow, r.Status, e.timeout, stuckHint(r))
		}
		time.Sleep(time.Millisecond) // polling: the store pushes no "idle" signal
	}
}

func stuckHint(r *trellis.Run) string {
	if r.Status == trellis.StatusPending {
		return "is its workflow registered with Options.Workflows or Env.Register?"
	}
	return fmt.Sprintf("does a step wait for something the test does not give it? (%s)", r.WaitReason)
}

// busyRun returns a run that is executing or due by the fake clock, if any.
func (e *Env) busyRun() (*trellis.Run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	page, err := e.c.List(ctx, trellis.ListOptions{
		Statuses: []trellis.Status{trellis.StatusPending, trellis.StatusRunning, trellis.StatusWaiting}, Limit: 1000})
	if err != nil {
		return nil, err
	}
	now := e.clk.Now()
	for _, r := range page.Runs {
		due := !r.AvailableAt.IsZero() && !r.AvailableAt.After(now)
		if r.Status == trellis.StatusRunning || due {
			return r, nil
		}
	}
	return nil, nil
}

// nextDue returns the earliest time a waiting or pending run becomes due, ahead
// of the fake clock.
func (e *Env) nextDue() (time.Time, bool) {
	ctx, cancel := e.ctx()
	defer cancel()
	page, err := e.c.List(ctx, trellis.ListOptions{
		Statuses: []trellis.Status{trellis.StatusPending, trellis.StatusWaiting}, Limit: 1000})
	if err != nil {
		e.fatalf("listing runs: %v", err)
	}
	var next time.Time
	for _, r := range page.Runs {
		if !r.AvailableAt.IsZero() && (next.IsZero() || r.AvailableAt.Before(next)) {
			next = r.AvailableAt
		}
	}
	return next, !next.IsZero()
}
