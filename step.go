package trellis

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// ErrStepTimeout: a step attempt ran longer than StepOptions.Timeout. It is retried
// like any other error.
var ErrStepTimeout = errors.New("step attempt timed out")

// stepAbandonGrace is how long a step whose context is done may take to return
// before the engine stops waiting for it (a step that ignores its context).
const stepAbandonGrace = 200 * time.Millisecond

// StepOptions configure a step.
type StepOptions struct {
	// Retry is the retry policy; the zero value retries 3 times with exponential backoff.
	Retry RetryPolicy
	// Timeout bounds each attempt; 0 means no limit. An attempt that ignores its
	// context is abandoned shortly after the timeout and counted as failed.
	Timeout time.Duration
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

type stepInfoKey struct{}

// StepInfo returns the attempt a step's context belongs to; the zero value outside a step.
func StepInfo(ctx context.Context) StepAttempt {
	a, _ := ctx.Value(stepInfoKey{}).(StepAttempt)
	return a
}

// Step runs fn as a step of the workflow and returns its result. The first time, fn
// runs (with retries per opts) and its result or final error is checkpointed; on
// replay the recorded result is returned and fn does not run.
func Step[T any](wc *Context, name string, fn func(ctx context.Context) (T, error), opts ...StepOptions) (T, error) {
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpStep, name)
	if rec != nil && rec.Done {
		return decodeStep[T](rs, rec)
	}
	op, ok := newStepCall(wc, name, pos, rec, fn, opts).execute()
	if !ok {
		rs.checkUnwind()
	}
	return decodeStep[T](rs, op)
}

// Future is the pending result of an async step.
type Future[T any] struct {
	rs   *runState
	done chan struct{}
	op   *store.Op // nil when the run is unwinding
}

// Async starts fn as a step that runs in parallel with the workflow and returns a
// future for its result. Its position in history is reserved when Async is called, so
// replay is deterministic whatever the order in which parallel steps complete.
func Async[T any](wc *Context, name string, fn func(ctx context.Context) (T, error), opts ...StepOptions) *Future[T] {
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpStep, name)
	f := &Future[T]{rs: rs, done: make(chan struct{})}
	if rec != nil && rec.Done {
		f.op = rec
		close(f.done)
		return f
	}
	call := newStepCall(wc, name, pos, rec, fn, opts)
	rs.inflight.Add(1)
	go func() {
		defer rs.inflight.Done()
		defer close(f.done)
		if op, ok := call.execute(); ok {
			f.op = op
		}
	}()
	return f
}

// Get waits for the step and returns its result.
func (f *Future[T]) Get(wc *Context) (T, error) {
	select {
	case <-f.done:
	case <-f.rs.unwinding:
		f.rs.stopNow()
	}
	if f.op == nil {
		f.rs.checkUnwind()
	}
	return decodeStep[T](f.rs, f.op)
}

func (f *Future[T]) waiterOf() waiter { return f }
func (f *Future[T]) settled() bool    { return f.Ready() }
func (f *Future[T]) try() bool        { return f.Ready() }
func (f *Future[T]) doneChan() <-chan struct{} {
	return f.done
}
func (f *Future[T]) needs() (*time.Time, []string, string) { return nil, nil, "a step running" }

// Ready reports whether the result is available without waiting.
func (f *Future[T]) Ready() bool {
	select {
	case <-f.done:
		return f.op != nil
	default:
		return false
	}
}

func decodeStep[T any](rs *runState, op *store.Op) (T, error) {
	var v T
	if op.Error != nil {
		return v, &StepError{Step: op.Name, Attempts: op.Attempts, Message: op.Error.Message, Type: op.Error.Type}
	}
	if err := rs.codec.Unmarshal(op.Result, &v); err != nil {
		rs.block(&NonDeterminismError{Position: op.Position, Recorded: describe(op.Kind, op.Name) + " with a result of another type",
			Requested: fmt.Sprintf("step %q returning %T", op.Name, v)})
	}
	return v, nil
}

// stepCall executes one step's attempts.
type stepCall struct {
	wc      *Context
	name    string
	pos     int
	attempt int // attempts already made (from history)
	started time.Time
	policy  RetryPolicy
	timeout time.Duration
	fn      func(ctx context.Context) (any, error)
	// txFn, for a TxStep, replaces fn: each attempt runs it and records the step
	// in one store transaction (txc).
	txc  store.TxCheckpointer
	txFn func(ctx context.Context, tx any) ([]byte, error)
}

func newStepCall[T any](wc *Context, name string, pos int, rec *store.Op, fn func(context.Context) (T, error), opts []StepOptions) *stepCall {
	var o StepOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	sc := &stepCall{wc: wc, name: name, pos: pos, started: wc.rs.now(), policy: o.Retry.withDefaults(), timeout: o.Timeout}
	if rec != nil {
		sc.attempt, sc.started = rec.Attempts, rec.StartedAt
	}
	// The result is encoded by the caller of runAttempt, not on the attempt's
	// short-lived goroutine, whose stack would grow for the encoder each time.
	sc.fn = func(ctx context.Context) (any, error) { return fn(ctx) }
	return sc
}

// execute runs attempts until one succeeds, the error is final, or the run must stop.
// It returns the completed op (queued for the next checkpoint), or ok=false when the
// run is unwinding and the step's outcome is not to be recorded.
func (sc *stepCall) execute() (op *store.Op, ok bool) {
	rs := sc.wc.rs
	for {
		if rs.ctx.Err() != nil {
			rs.requestUnwind(rs.ctxUnwindKind(), nil, nil, "")
			return nil, false
		}
		if err := rs.interrupted(sc.wc.detached); err != nil {
			return sc.finish(nil, err), true
		}
		if err := sc.flush(); err != nil {
			rs.requestUnwind(flushFailure(err), err, nil, "")
			return nil, false
		}
		sc.attempt++
		t0 := rs.now()
		recorded, res, err, stopErr := sc.attemptOnce()
		if stopErr != nil {
			rs.requestUnwind(unwindAbandon, stopErr, nil, "")
			return nil, false
		}
		if rs.ctx.Err() != nil {
			rs.requestUnwind(rs.ctxUnwindKind(), nil, nil, "")
			return nil, false
		}
		switch {
		case err == nil && recorded != nil:
			return recorded, true
		case err == nil:
			return sc.finish(res, nil), true
		}
		att := store.Attempt{Position: sc.pos, Attempt: sc.attempt, Error: *errorInfo(err), StartedAt: t0, FinishedAt: rs.now()}
		rs.recordAttempt(sc.op(), att)
		if !sc.policy.retryable(err, sc.attempt) {
			return sc.finish(nil, err), true
		}
		if !sc.backoff() {
			return nil, false
		}
	}
}

// flush makes what precedes the step durable before an attempt. A transactional
// step flushes everything, derivable waits included: its transaction then carries
// only the step's op and what async steps queue meanwhile.
func (sc *stepCall) flush() error {
	if sc.txFn == nil {
		return sc.wc.rs.flush()
	}
	_, err := sc.wc.rs.checkpoint(&store.CheckpointParams{Status: store.StatusRunning}, false)
	return err
}

// attemptOnce runs one attempt. It returns the encoded result of a plain step
// (to queue), or the op a transactional step recorded itself; err is the
// attempt's failure; stopErr a store failure after which the run must stop.
func (sc *stepCall) attemptOnce() (recorded *store.Op, res []byte, err, stopErr error) {
	if sc.txFn != nil {
		recorded, err, stopErr = sc.attemptTx()
		return recorded, nil, err, stopErr
	}
	v, err := sc.runAttempt()
	if err == nil {
		res, err = sc.wc.rs.encode(v)
	}
	return nil, res, err, nil
}

// backoff waits before the next attempt: in place for a short delay, or by suspending
// the run (releasing the worker slot) for a long one. It reports whether to go on.
func (sc *stepCall) backoff() bool {
	rs := sc.wc.rs
	delay := sc.policy.Backoff.Delay(sc.attempt)
	if delay > rs.c.cfg.Worker.MaxInlineBackoff {
		wake := rs.now().Add(delay)
		reason := fmt.Sprintf("retry backoff: step %q attempt %d at %s", sc.name, sc.attempt+1, reasonTime(wake))
		rs.requestUnwind(unwindSuspend, nil, &wake, reason)
		return false
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	cancelled := rs.cancelCtx.Done()
	if sc.wc.detached {
		cancelled = nil
	}
	select {
	case <-t.C:
	case <-cancelled: // the next loop turn records the cancellation
	case <-rs.ctx.Done():
	}
	return true
}

// op builds the step's history entry, not yet done.
func (sc *stepCall) op() *store.Op {
	return &store.Op{Position: sc.pos, Kind: store.OpStep, Name: sc.name, Attempts: sc.attempt, StartedAt: sc.started}
}

// finish queues the step's final outcome and returns its op.
func (sc *stepCall) finish(result []byte, err error) *store.Op {
	rs := sc.wc.rs
	at := rs.now()
	op := sc.op()
	op.Done, op.Result, op.FinishedAt = true, result, &at
	if err != nil {
		op.Error = errorInfo(err)
	}
	rs.record(op, nil)
	return op
}

// runAttempt runs fn once on its own goroutine, so that a step ignoring its context is
// abandoned shortly after the context ends. Context errors are mapped to their cause.
func (sc *stepCall) runAttempt() (any, error) {
	rs := sc.wc.rs
	ctx, cancel := sc.wc.stepContext(sc.timeout)
	defer cancel()
	ctx = context.WithValue(ctx, stepInfoKey{}, StepAttempt{
		RunID: rs.run.ID, Step: sc.name, Position: sc.pos, Attempt: sc.attempt,
		IdempotencyKey: rs.run.ID + "/" + strconv.Itoa(sc.pos),
	})
	type outcome struct {
		v   any
		err error
	}
	ch := make(chan outcome, 1)
	go func() {
		v, err := callSafely(ctx, sc.fn)
		ch <- outcome{v, err}
	}()
	var o outcome
	select {
	case o = <-ch:
	case <-ctx.Done():
		grace := time.NewTimer(stepAbandonGrace)
		select {
		case o = <-ch:
		case <-grace.C:
			o.err = ctx.Err()
		}
		grace.Stop()
	}
	if o.err != nil && ctx.Err() != nil {
		o.err = sc.contextError(ctx, o.err)
	}
	return o.v, o.err
}

// contextError names why a step's context ended: cancellation, the run's deadline
// or the attempt's timeout.
func (sc *stepCall) contextError(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrCancelled), errors.Is(cause, ErrDeadlineExceeded):
		return cause
	case errors.Is(cause, context.DeadlineExceeded) && sc.timeout > 0:
		return fmt.Errorf("%w after %s", ErrStepTimeout, sc.timeout)
	}
	return err
}

// panicError is a panic in a step, turned into an error (and retried like one).
type panicError struct {
	value any
	stack string
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v\n%s", e.value, e.stack) }

func callSafely(ctx context.Context, fn func(context.Context) (any, error)) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: string(debug.Stack())}
		}
	}()
	return fn(ctx)
}
