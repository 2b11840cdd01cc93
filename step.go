package trellis

import (
	"context"
	"reflect"
	"time"

	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/store"
)

// StepOptions configure a step.
type StepOptions struct {
	// Retry is the retry policy; the zero value retries 3 times with exponential backoff.
	Retry RetryPolicy
	// Timeout bounds each attempt; 0 means no limit. An attempt that ignores its
	// context is abandoned shortly after the timeout and counted as failed.
	Timeout time.Duration
	// TotalTimeout bounds the whole step: all its attempts and the backoffs
	// between them, from the start of its first attempt as recorded in history;
	// 0 means no limit. When it passes (or the next attempt could not start
	// before it), the step fails with ErrStepTotalTimeout and is not retried. It
	// holds across crashes: the next owner of the run enforces it.
	TotalTimeout time.Duration
}

// engineOptions are the options of the first of opts, with defaults, as the
// engine takes them.
func engineOptions(opts []StepOptions) engine.StepOptions {
	var o StepOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	p := o.Retry.withDefaults()
	return engine.StepOptions{MaxAttempts: p.MaxAttempts, Backoff: p.Backoff, NonRetryableTypes: p.NonRetryableTypes,
		Timeout: o.Timeout, TotalTimeout: o.TotalTimeout,
		AttemptsDefault: o.Retry.MaxAttempts <= 0, BackoffDefault: o.Retry.Backoff == nil}
}

// StepAttempt describes the step attempt a context belongs to; see StepInfo.
type StepAttempt struct {
	RunID    string
	Step     string
	Position int
	Attempt  int
	// IdempotencyKey is stable across attempts and replays of this step
	// ("<run id>/<position>"): pass it to external systems to deduplicate effects.
	IdempotencyKey string
}

// StepInfo returns the attempt a step's context belongs to; the zero value outside a step.
func StepInfo(ctx context.Context) StepAttempt { return StepAttempt(engine.StepInfo(ctx)) }

// Step runs fn as a step of the workflow and returns its result. The first time, fn
// runs (with retries per opts) and its result or final error is checkpointed; on
// replay the recorded result is returned and fn does not run.
func Step[T any](wc *Context, name string, fn func(ctx context.Context) (T, error), opts ...StepOptions) (T, error) {
	// The result is encoded by the engine, not on the attempt's goroutine.
	op := wc.rs.Step(name, func(ctx context.Context) (any, error) { return stepFunc(wc, name, fn)(ctx) }, engineOptions(opts), wc.detached)
	return decodeStep[T](wc.rs, op)
}

// Future is the pending result of an async step.
type Future[T any] struct {
	f engine.StepFuture
}

// Async starts fn as a step that runs in parallel with the workflow and returns a
// future for its result. Its position in history is reserved when Async is called, so
// replay is deterministic whatever the order in which parallel steps complete.
func Async[T any](wc *Context, name string, fn func(ctx context.Context) (T, error), opts ...StepOptions) *Future[T] {
	f := &Future[T]{}
	wc.rs.Async(&f.f, name, func(ctx context.Context) (any, error) { return stepFunc(wc, name, fn)(ctx) }, engineOptions(opts), wc.detached)
	return f
}

// Get waits for the step and returns its result.
func (f *Future[T]) Get(wc *Context) (T, error) {
	return decodeStep[T](wc.rs, f.f.Wait())
}

// Ready reports whether the result is available without waiting.
func (f *Future[T]) Ready() bool { return f.f.Ready() }

func (f *Future[T]) waiterOf() engine.Waiter { return &f.f }

// stepFunc returns the function an attempt of step name runs: fn, or the
// override Config.StepOverride gives for it (consulted only when an attempt runs).
func stepFunc[T any](wc *Context, name string, fn func(context.Context) (T, error)) func(context.Context) (T, error) {
	if o, ok := wc.rs.StepOverride(name, reflect.TypeOf(fn)); ok {
		if f, ok := o.(func(context.Context) (T, error)); ok {
			return f
		}
	}
	return fn
}

func decodeStep[T any](rs *engine.RunState, op *store.Op) (T, error) {
	var v T
	if op.Error != nil {
		return v, &StepError{Step: op.Name, Attempts: op.Attempts, Message: op.Error.Message, Type: op.Error.Type}
	}
	rs.DecodeResult(op, &v)
	return v, nil
}
