package trellis

import (
	"context"
	"log/slog"
	"time"

	"github.com/trellis-dev/trellis/internal/engine"
)

// Context is what a workflow function receives. Everything a workflow does that must
// replay identically goes through it (or through Step, Async and the other op
// functions that take it): the values it returns are recorded in the run's history
// the first time and read back on replay.
//
// A Context is used only from the workflow's own goroutine.
type Context struct {
	rs       *engine.RunState
	detached bool
}

// RunID returns the ID of the run.
func (wc *Context) RunID() string { return wc.rs.Run().ID }

// WorkflowID returns the workflow ID (the caller's key) of the run.
func (wc *Context) WorkflowID() string { return wc.rs.Run().WorkflowID }

// Version returns the workflow version the run was started with (WorkflowOptions.Version
// at start). It never changes for the life of the run.
func (wc *Context) Version() int { return wc.rs.Run().Version }

// RunAttempt returns the run's execution number: 1 for its first claim, one
// more for each later one (after a wait, a crash, a hand-back). It differs
// between executions, so a workflow must not branch on it (the run would
// block as non-deterministic); it is for logs and metrics. The TypeScript
// and Python SDKs show the same number (ctx.run.attempt).
//
// For the attempt of the workflow function that workflow retries count, see
// WorkflowAttempt.
func (wc *Context) RunAttempt() int { return wc.rs.Run().Attempts }

// WorkflowAttempt returns the run's attempt of its workflow function: 1, then
// one more after each failed attempt that a workflow retry followed
// (WorkflowOptions.Retry, StartOptions.Retry). It changes only between run
// attempts, never between the executions of one (waits, crashes and
// hand-backs count in RunAttempt, not here): code may branch on it, e.g. to
// take a fallback on a last attempt, as long as it records the same ops for
// what it replays. See docs/workflow-retries.md.
func (wc *Context) WorkflowAttempt() int { return max(wc.rs.Run().WorkflowAttempt, 1) }

// Cancelled reports whether the run has been cancelled.
func (wc *Context) Cancelled() bool { return wc.rs.Cancelled() }

// Detached returns a Context whose ops ignore cancellation, for cleanup steps after
// ErrCancelled. The run still ends cancelled. A deadline still applies.
func (wc *Context) Detached() *Context { return &Context{rs: wc.rs, detached: true} }

// Now returns the current time, recorded: a replay returns the same time.
func (wc *Context) Now() time.Time { return wc.rs.Now() }

// UUID returns a random UUID (version 4) as a string, recorded.
func (wc *Context) UUID() string { return wc.rs.UUID() }

// Random returns a random uint64, recorded.
func (wc *Context) Random() uint64 { return wc.rs.Random() }

// Patched reports whether the run takes the new branch of a code change named id.
// A run that reaches the check for the first time records it and gets true; a run
// whose history was written before the check existed gets false, and keeps getting
// false on every replay. Use it to change workflow code while runs are in flight:
//
//	if wc.Patched("send-sms") { ... new code ... } else { ... old code ... }
func (wc *Context) Patched(id string) bool { return wc.rs.Patched(id) }

// Set stores a value in the run's store under key. The write is saved in the same
// transaction as the run's next checkpoint; later ops and clients (Client.Value) see it.
func (wc *Context) Set(key string, v any) error { return wc.rs.Set(key, v) }

// Delete removes key from the run's store.
func (wc *Context) Delete(key string) { wc.rs.Delete(key) }

// Get decodes the value stored under key into v. It reports false when the key is
// absent. It reads the run's own replayed state, so it is deterministic.
func (wc *Context) Get(key string, v any) (bool, error) { return wc.rs.Get(key, v) }

// Logger returns a logger for workflow code, writing to Config.Logger with the
// run ID, workflow ID and workflow as attributes. It does not repeat itself: its
// lines are dropped while the run replays the ops its history already holds, so
// each line is written once, by the execution that first passes it.
func (wc *Context) Logger() *slog.Logger { return wc.rs.Logger() }

// StepLogger returns a logger for a step function: Config.Logger with the run's
// attributes, the step's name and the attempt. A step runs only when its result is
// not recorded, so none of its lines is a replay. Outside a step it returns
// slog.Default().
func StepLogger(ctx context.Context) *slog.Logger {
	if l := engine.StepLogger(ctx); l != nil {
		return l
	}
	return slog.Default()
}
