package trellis

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
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
	// AtMostOnce makes the step at most once: the start of each attempt is
	// made durable (checkpointed) before fn runs, and an attempt that started
	// but never recorded how it ended (its process crashed, its lease expired,
	// the server ended it after its timeout) is not run again. Its outcome is
	// unknown, and OnUnknown decides what the step does instead. A failure an
	// attempt reports (fn returned an error, its Timeout passed, it panicked) is
	// known, and is retried by Retry as for any step: give MaxAttempts 1 (or
	// NonRetryableTypes) to run fn at most once in all. Each attempt costs one
	// checkpoint more than a plain step's. See "At-most-once steps" in the
	// package documentation. A TxStep ignores it: its writes commit with its
	// record, exactly once.
	AtMostOnce bool
	// OnUnknown is what an at-most-once step does when an attempt's outcome is
	// unknown; the zero value returns ErrStepOutcomeUnknown to the workflow.
	OnUnknown OnUnknown
	// UnknownApproval describes the approval request of OnUnknown
	// UnknownAskApproval: its approvers and timeout (Subject and Details are
	// filled in when empty). A timed-out request ends the step as
	// UnknownReturnError would.
	UnknownApproval ApprovalOptions
}

// OnUnknown is what an at-most-once step (StepOptions.AtMostOnce) does when an
// attempt's outcome is unknown. In every case the step is first recorded done
// with an error of type "step_outcome_unknown" (ErrStepOutcomeUnknown), so
// that replays return the same.
type OnUnknown int

const (
	// UnknownReturnError returns a *StepError that is ErrStepOutcomeUnknown
	// (errors.Is) to the workflow, which decides.
	UnknownReturnError OnUnknown = iota
	// UnknownFailRun fails the run with ErrStepOutcomeUnknown: the step does
	// not return to the workflow.
	UnknownFailRun
	// UnknownAskApproval requests an approval (named "<step>: outcome unknown",
	// recorded in history as any approval) and waits for the decision, the run
	// holding no worker meanwhile. Approved: the step runs again, as a new
	// step op with the idempotency key of the one it repeats (at most once
	// again, asking again if that is unknown too). Rejected with a comment
	// that starts with "done": the step is treated as done, returning the zero
	// value of its result and no error. Rejected otherwise: it returns
	// ErrStepOutcomeUnknown, as UnknownReturnError.
	UnknownAskApproval
)

// String returns the policy's name.
func (p OnUnknown) String() string {
	switch p {
	case UnknownReturnError:
		return "return_error"
	case UnknownFailRun:
		return "fail_run"
	case UnknownAskApproval:
		return "ask_approval"
	}
	return fmt.Sprintf("OnUnknown(%d)", int(p))
}

// engineOptions are a step's options, with defaults, as the engine takes them.
func engineOptions(o StepOptions) engine.StepOptions {
	p := o.Retry.withDefaults()
	return engine.StepOptions{MaxAttempts: p.MaxAttempts, Backoff: p.Backoff, NonRetryableTypes: p.NonRetryableTypes,
		Timeout: o.Timeout, TotalTimeout: o.TotalTimeout,
		AtMostOnce: o.AtMostOnce, FailRunOnUnknown: o.AtMostOnce && o.OnUnknown == UnknownFailRun,
		AttemptsDefault: o.Retry.MaxAttempts <= 0, BackoffDefault: o.Retry.Backoff == nil}
}

// stepOptions returns the options of a step (call is "trellis.Step" or
// "trellis.Async"): an ErrInvalidOptions error for more than one value, an
// ErrInvalidParams error for an OnUnknown policy this package does not know,
// or one given without AtMostOnce. Such a step returns the error without
// running or recording anything (a replay returns it again): a programming
// error, found the first time the step is reached.
func stepOptions(call, name string, opts []StepOptions) (StepOptions, error) {
	o, err := oneOption(call, opts)
	switch {
	case err != nil:
		return o, fmt.Errorf("step %q: %w", name, err)
	case o.OnUnknown < UnknownReturnError || o.OnUnknown > UnknownAskApproval:
		return o, fmt.Errorf("%w: step %q: StepOptions.OnUnknown is %d, not one of UnknownReturnError, UnknownFailRun, UnknownAskApproval",
			ErrInvalidParams, name, int(o.OnUnknown))
	case o.OnUnknown != UnknownReturnError && !o.AtMostOnce:
		return o, fmt.Errorf("%w: step %q: StepOptions.OnUnknown %s applies to at-most-once steps only (set AtMostOnce)",
			ErrInvalidParams, name, o.OnUnknown)
	}
	return o, nil
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
	o, err := stepOptions("trellis.Step", name, opts)
	if err != nil {
		var zero T
		return zero, err
	}
	// The result is encoded by the engine, not on the attempt's goroutine.
	op := wc.rs.Step(name, func(ctx context.Context) (any, error) { return stepFunc(wc, name, fn)(ctx) }, engineOptions(o), wc.detached)
	return settleStep(wc, name, fn, o, op)
}

// settleStep returns a step's outcome from its op, asking for an approval
// first when an at-most-once step's outcome is unknown and its policy says so.
func settleStep[T any](wc *Context, name string, fn func(ctx context.Context) (T, error), o StepOptions, op *store.Op) (T, error) {
	keyPos := op.Position // every repetition uses the first one's key
	for o.AtMostOnce && o.OnUnknown == UnknownAskApproval && engine.IsOutcomeUnknown(op) {
		var zero T
		d, err := Approval(wc, name+": outcome unknown", unknownApproval(wc, o.UnknownApproval, op, keyPos))
		switch {
		case err != nil || !d.Approved && !decidedDone(d.Comment):
			return decodeStep[T](wc.rs, op) // ErrStepOutcomeUnknown
		case !d.Approved:
			return zero, nil
		}
		// Approved: the step runs again, keeping the idempotency key of the
		// step whose outcome is unknown.
		eo := engineOptions(o)
		eo.KeyPosition, eo.KeyPositionSet = keyPos, true
		op = wc.rs.Step(name, func(ctx context.Context) (any, error) { return stepFunc(wc, name, fn)(ctx) }, eo, wc.detached)
	}
	return decodeStep[T](wc.rs, op)
}

// decidedDone reports whether a rejection's comment treats the step as done.
func decidedDone(comment string) bool {
	return len(comment) >= 4 && strings.EqualFold(comment[:4], "done")
}

// unknownApproval is the approval request for the unknown outcome of op.
func unknownApproval(wc *Context, base ApprovalOptions, op *store.Op, keyPos int) ApprovalOptions {
	if base.Subject == "" {
		base.Subject = fmt.Sprintf("Step %q may or may not have taken effect: approve to run it again; reject with a comment starting with \"done\" to treat it as done; reject otherwise to end it with its unknown outcome (ErrStepOutcomeUnknown)", op.Name)
	}
	if base.Details == nil {
		base.Details = map[string]any{
			"run_id": wc.rs.Run().ID, "step": op.Name, "position": op.Position, "attempts": op.Attempts,
			"error": op.Error.Message, "idempotency_key": wc.rs.Run().ID + "/" + strconv.Itoa(keyPos),
		}
	}
	return base
}

// Future is the pending result of an async step.
type Future[T any] struct {
	f    engine.StepFuture
	name string
	fn   func(ctx context.Context) (T, error)
	opts StepOptions
	err  error // the options' error (stepOptions): the step did not start
}

// Async starts fn as a step that runs in parallel with the workflow and returns a
// future for its result. Its position in history is reserved when Async is called, so
// replay is deterministic whatever the order in which parallel steps complete.
func Async[T any](wc *Context, name string, fn func(ctx context.Context) (T, error), opts ...StepOptions) *Future[T] {
	f := &Future[T]{name: name, fn: fn}
	if f.opts, f.err = stepOptions("trellis.Async", name, opts); f.err != nil {
		f.f.Settle(wc.rs, &store.Op{Kind: store.OpStep, Name: name, Done: true, Error: &store.ErrorInfo{Message: f.err.Error()}})
		return f
	}
	wc.rs.Async(&f.f, name, func(ctx context.Context) (any, error) { return stepFunc(wc, name, fn)(ctx) }, engineOptions(f.opts), wc.detached)
	return f
}

// Get waits for the step and returns its result.
// For an at-most-once step whose outcome is unknown and whose policy asks for
// an approval, Get asks for it (and runs the step again, when approved, as
// Step would): that happens on the workflow's goroutine, where Get is called.
func (f *Future[T]) Get(wc *Context) (T, error) {
	if f.err != nil {
		var zero T
		return zero, f.err
	}
	return settleStep(wc, f.name, f.fn, f.opts, f.f.Wait())
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
