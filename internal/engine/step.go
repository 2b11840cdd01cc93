package engine

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// stepAbandonGrace is how long a step whose context is done may take to return
// before the engine stops waiting for it (a step that ignores its context).
const stepAbandonGrace = 200 * time.Millisecond

// errAttemptTimeout and errTotalTimeout are the causes of a step context ended
// by the attempt's timeout and by the step's total timeout.
var (
	errAttemptTimeout = fmt.Errorf("step attempt timeout: %w", context.DeadlineExceeded)
	errTotalTimeout   = fmt.Errorf("step total timeout: %w", context.DeadlineExceeded)
)

// Backoff computes the delay before retry number n (n = 1 after the first failure).
type Backoff interface {
	Delay(n int) time.Duration
}

// StepOptions configure a step, with every default already applied.
type StepOptions struct {
	// MaxAttempts counts the first attempt. Required (at least 1).
	MaxAttempts int
	// Backoff between attempts. Required.
	Backoff Backoff
	// NonRetryableTypes lists recorded error types that fail the step at once.
	NonRetryableTypes []string
	// Timeout bounds each attempt; 0 means no limit.
	Timeout time.Duration
	// TotalTimeout bounds the step from the start of its first attempt, as
	// recorded, across attempts and backoffs; 0 means no limit. When it passes,
	// the step fails with ErrStepTotalTimeout and is not retried.
	TotalTimeout time.Duration
	// AtMostOnce makes each attempt's start durable before fn runs (one
	// checkpoint per attempt, with an attempt row of outcome store.AttemptStarted
	// that the attempt's final record replaces). A step found, on replay, with
	// its last attempt started, lost or timed out and no outcome recorded is not
	// run again: it ends with ErrStepOutcomeUnknown (see outcomeUnknown). A
	// failure an attempt reported is retried by the policy as usual. Ignored by
	// a transactional step, whose effects commit with its record.
	AtMostOnce bool
	// FailRunOnUnknown (with AtMostOnce) fails the run with the step's
	// ErrStepOutcomeUnknown instead of returning it to the workflow.
	FailRunOnUnknown bool
	// KeyPosition, when KeyPositionSet, is the position the attempts'
	// idempotency key names instead of the step's own: a step run again after
	// an unknown outcome keeps the key of the step it repeats.
	KeyPosition    int
	KeyPositionSet bool
	// AttemptsDefault and BackoffDefault say that MaxAttempts and Backoff are
	// the SDK's defaults, not the caller's: the default retry policy of the
	// run's queue (store.ClaimedRun.QueueRetry), when it has one, replaces them.
	AttemptsDefault, BackoffDefault bool
}

// withQueue returns o with the queue's default retry policy q in place of
// the SDK's defaults.
func (o StepOptions) withQueue(q *store.QueueRetry) StepOptions {
	if q == nil {
		return o
	}
	if o.AttemptsDefault && q.MaxAttempts > 0 {
		o.MaxAttempts = q.MaxAttempts
	}
	if o.BackoffDefault && q.InitialBackoff > 0 {
		o.Backoff = QueueBackoff{Initial: time.Duration(q.InitialBackoff), Max: time.Duration(q.MaxBackoff)}
	}
	return o
}

// QueueBackoff is a queue's retry backoff: Initial, doubling per retry, capped
// at Max (no cap when 0).
type QueueBackoff struct{ Initial, Max time.Duration }

// Delay implements Backoff.
func (b QueueBackoff) Delay(attempt int) time.Duration {
	d := b.Initial
	for i := 1; i < attempt && (b.Max <= 0 || d < b.Max); i++ {
		d *= 2
	}
	if b.Max > 0 && d > b.Max {
		d = b.Max
	}
	return d
}

// StepAttempt describes the step attempt a context belongs to.
type StepAttempt struct {
	RunID          string
	Step           string
	Position       int
	Attempt        int
	IdempotencyKey string
}

type stepInfoKey struct{}

// stepValue is what a step attempt's context carries.
type stepValue struct {
	StepAttempt
	rs *RunState
}

// StepInfo returns the attempt a step's context belongs to; the zero value outside a step.
func StepInfo(ctx context.Context) StepAttempt {
	v, _ := ctx.Value(stepInfoKey{}).(*stepValue)
	if v == nil {
		return StepAttempt{}
	}
	return v.StepAttempt
}

// Step runs fn as a step and returns its op, done: on replay the recorded op, else
// the outcome of fn's attempts (retried per o), queued for the next checkpoint.
// The result of fn is encoded with the run's codec.
func (rs *RunState) Step(name string, fn func(context.Context) (any, error), o StepOptions, detached bool) *store.Op {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpStep, name)
	if rec != nil && rec.Done {
		if o.FailRunOnUnknown && IsOutcomeUnknown(rec) {
			rs.failRun(&outcomeUnknownError{msg: rec.Error.Message})
			rs.checkUnwind()
		}
		return rec
	}
	op, ok := rs.newStepCall(name, pos, rec, fn, o, detached).execute()
	if !ok {
		rs.checkUnwind()
	}
	return op
}

// StepFuture is the pending outcome of an async step.
type StepFuture struct {
	rs   *RunState
	done chan struct{}
	op   *store.Op // nil when the run is unwinding
}

// Async starts fn as a step that runs in parallel with the workflow and fills f,
// the future of its outcome. Its position is reserved now, so replay is
// deterministic whatever the order in which parallel steps complete.
func (rs *RunState) Async(f *StepFuture, name string, fn func(context.Context) (any, error), o StepOptions, detached bool) {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpStep, name)
	f.rs, f.done = rs, make(chan struct{})
	if rec != nil && rec.Done {
		if o.FailRunOnUnknown && IsOutcomeUnknown(rec) {
			rs.failRun(&outcomeUnknownError{msg: rec.Error.Message})
			rs.checkUnwind()
		}
		f.op = rec
		close(f.done)
		return
	}
	call := rs.newStepCall(name, pos, rec, fn, o, detached)
	rs.inflight.Add(1)
	go func() {
		defer rs.inflight.Done()
		defer close(f.done)
		if op, ok := call.execute(); ok {
			f.op = op
		}
	}()
}

// Settle makes f a future already settled with op, which is not recorded:
// for a step refused before it started (its options are invalid), so that
// waiting on f (Get, Select) returns at once.
func (f *StepFuture) Settle(rs *RunState, op *store.Op) {
	f.rs, f.op, f.done = rs, op, make(chan struct{})
	close(f.done)
}

// Wait waits for the step and returns its op, done.
func (f *StepFuture) Wait() *store.Op {
	select {
	case <-f.done:
	case <-f.rs.unwinding:
		f.rs.stopNow()
	}
	if f.op == nil {
		f.rs.checkUnwind()
	}
	return f.op
}

// Ready reports whether the outcome is available without waiting.
func (f *StepFuture) Ready() bool {
	select {
	case <-f.done:
		return f.op != nil
	default:
		return false
	}
}

func (f *StepFuture) settled() bool             { return f.Ready() }
func (f *StepFuture) try() bool                 { return f.Ready() }
func (f *StepFuture) doneChan() <-chan struct{} { return f.done }
func (f *StepFuture) needs() (*time.Time, []string, string) {
	return nil, nil, "a step running"
}

// DecodeResult decodes a step's recorded result into v (a pointer); a result
// that does not decode stops the run as blocked.
func (rs *RunState) DecodeResult(op *store.Op, v any) {
	if err := rs.codec.Unmarshal(op.Result, v); err != nil {
		rs.block(&NonDeterminismError{Position: op.Position, Recorded: describe(op.Kind, op.Name) + " with a result of another type",
			Requested: fmt.Sprintf("step %q returning %s", op.Name, reflect.TypeOf(v).Elem())})
	}
}

// stepCall executes one step's attempts.
type stepCall struct {
	rs       *RunState
	detached bool
	name     string
	pos      int
	attempt  int // attempts already made (from history)
	// prior is how many of them were made in earlier attempts of the run
	// (workflow retries): they do not count against MaxAttempts.
	prior   int
	started time.Time
	opts    StepOptions
	fn      func(ctx context.Context) (any, error)
	// txFn, for a TxStep, replaces fn: each attempt runs it and records the step
	// in one store transaction (txc).
	txc  store.TxCheckpointer
	txFn func(ctx context.Context, tx any) ([]byte, error)
	// attemptStart is when the current attempt started (zero: none in this
	// execution); failReported is set once a final failure was queued as
	// step.failed.
	attemptStart time.Time
	failReported bool
	// ended is the step's last attempt when it ended without its worker
	// (store.AttemptLost, store.AttemptTimedOut: recorded by the claim that
	// took the run), nil otherwise.
	ended *store.Attempt
	// unknown, for an at-most-once step, is its last recorded attempt when
	// that attempt's outcome is unknown (see outcomeUnknown): it takes
	// precedence over ended, which a plain step retries.
	unknown *store.Attempt
}

func (rs *RunState) newStepCall(name string, pos int, rec *store.Op, fn func(context.Context) (any, error), o StepOptions, detached bool) *stepCall {
	sc := &stepCall{rs: rs, detached: detached, name: name, pos: pos, started: rs.now(), opts: o.withQueue(rs.queueRetry), fn: fn}
	if rec != nil {
		sc.attempt, sc.started = rec.Attempts, rec.StartedAt
		if len(rs.run.WorkflowAttempts) > 0 {
			sc.prior = min(rs.run.PriorAttempts(pos), rec.Attempts)
		}
		if n := len(rec.AttemptLog); n > 0 {
			if a := &rec.AttemptLog[n-1]; a.Attempt == rec.Attempts &&
				(a.Outcome == store.AttemptLost || a.Outcome == store.AttemptTimedOut) {
				sc.ended = a
			}
		}
		if o.AtMostOnce {
			sc.unknown = unknownAttempt(rec)
		}
	}
	return sc
}

// endedFinal returns the error that ends the step without another attempt when
// its last attempt ended without its worker (lost or timed out) and may not be
// retried: it was the last the policy allows (a lost or timed-out attempt
// counts as one), or its error type is non-retryable. The step then fails as
// if that attempt had failed with that error. nil otherwise: the next attempt
// starts at once (the lease's expiry, or the timeout and its grace, already
// separated the two; the policy's backoff is not waited).
func (sc *stepCall) endedFinal() error {
	a := sc.ended
	if a == nil || (sc.attempt < sc.opts.MaxAttempts && !slices.Contains(sc.opts.NonRetryableTypes, a.Error.Type)) {
		return nil
	}
	return &TypedError{Msg: a.Error.Message, Type: a.Error.Type}
}

// execute runs attempts until one succeeds, the error is final, or the run must stop.
// It returns the completed op (queued for the next checkpoint), or ok=false when the
// run is unwinding and the step's outcome is not to be recorded.
func (sc *stepCall) execute() (op *store.Op, ok bool) {
	rs := sc.rs
	if sc.unknown != nil {
		return sc.outcomeUnknown()
	}
	if sc.opts.TotalTimeout > 0 && sc.attempt == 0 {
		// The total timeout runs from the first attempt's start as recorded, so
		// that the next owner of the run enforces it after a crash.
		rs.record(sc.op(), nil)
	}
	if err := sc.endedFinal(); err != nil {
		return sc.finish(nil, err), true
	}
	for {
		if op, stop, ok := sc.mayStart(); stop {
			return op, ok
		}
		if !sc.atMostOnce() { // an at-most-once attempt began in mayStart
			sc.attempt++
			sc.attemptStart = rs.now()
		}
		t0 := sc.attemptStart
		cur := rs.ctl.StepStarted(sc.name, sc.pos, sc.attempt, t0, sc.opts.Timeout)
		recorded, res, err, stopErr := sc.attemptOnce()
		rs.ctl.StepEnded(cur)
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
		if op, stop, ok := sc.failed(err, t0); stop {
			return op, ok
		}
	}
}

// mayStart decides whether the next attempt may start: stop is set, with what
// execute returns, when the run must stop or the step ends without it. What
// precedes the attempt is made durable first.
func (sc *stepCall) mayStart() (op *store.Op, stop, ok bool) {
	rs := sc.rs
	if rs.ctx.Err() != nil {
		rs.requestUnwind(rs.ctxUnwindKind(), nil, nil, "")
		return nil, true, false
	}
	if err := rs.interrupted(sc.detached); err != nil {
		return sc.finish(nil, err), true, true
	}
	if err := sc.pastTotal(0); err != nil {
		return sc.finish(nil, err), true, true
	}
	if sc.atMostOnce() {
		return sc.begin()
	}
	if err := sc.flush(); err != nil {
		rs.requestUnwind(flushFailure(err), err, nil, "")
		return nil, true, false
	}
	// The flush may have learnt of a cancellation (requested from another
	// process during a backoff): no attempt starts after it.
	if err := rs.interrupted(sc.detached); err != nil {
		return sc.finish(nil, err), true, true
	}
	// A lease that expired while the worker could not heartbeat (frozen,
	// cut off) may be another worker's by now: no attempt starts on it.
	if !rs.ctl.LeaseHeld(rs.ctx) {
		rs.requestUnwind(unwindAbandon, store.ErrLeaseLost, nil, "")
		return nil, true, false
	}
	return nil, false, false
}

func (sc *stepCall) atMostOnce() bool { return sc.opts.AtMostOnce && sc.txFn == nil }

// msgStarted is the error message of an attempt row of outcome started: what
// the history says of an attempt whose outcome was never recorded.
const msgStarted = "the attempt started; its outcome was not recorded"

// begin starts the next attempt of an at-most-once step: it checkpoints, with
// what precedes the step, the step's op (not done) at the new attempt and an
// attempt row of outcome started, so that a replay after a crash knows the
// attempt may have run. This checkpoint takes the place of the flush of
// mayStart: an at-most-once attempt costs one checkpoint more than a plain one
// only when nothing preceded it. The attempt's final record (a failed attempt
// row, the succeeded attempt row of the done op, see setAttemptStart) replaces
// the row; the store upserts attempt rows by (run, position, attempt).
func (sc *stepCall) begin() (op *store.Op, stop, ok bool) {
	rs := sc.rs
	sc.attempt++
	t0 := rs.now()
	sc.attemptStart = t0
	att := store.Attempt{Position: sc.pos, Attempt: sc.attempt, Outcome: store.AttemptStarted,
		Error: store.ErrorInfo{Message: msgStarted}, StartedAt: t0, FinishedAt: t0}
	rs.mu.Lock()
	rs.pending.ops = append(rs.pending.ops, sc.op())
	rs.pending.atts = append(rs.pending.atts, att)
	rs.mu.Unlock()
	if _, err := rs.checkpoint(&store.CheckpointParams{Status: store.StatusRunning}, false); err != nil {
		// Not written (or not known to be): the attempt does not run.
		rs.requestUnwind(flushFailure(err), err, nil, "")
		return nil, true, false
	}
	// The checkpoint may have learnt of a cancellation: the attempt whose
	// start it recorded does not run, and its row says why (a known outcome).
	if err := rs.interrupted(sc.detached); err != nil {
		att.Outcome, att.Error, att.FinishedAt = store.AttemptFailed, *rs.errorInfo(err), rs.now()
		sc.failReported = true
		rs.recordAttempt(sc.op(), att, sc.failedEvent(&att.Error, att.FinishedAt, true))
		return sc.finish(nil, err), true, true
	}
	return nil, false, false
}

// unknownAttempt returns rec's last attempt when its outcome is unknown: its
// row says it started (the worker died before recording how it ended), was
// lost (its lease expired while it ran) or timed out (ended by the store after
// its timeout); nil otherwise.
func unknownAttempt(rec *store.Op) *store.Attempt {
	if rec.Done || len(rec.AttemptLog) == 0 {
		return nil
	}
	a := rec.AttemptLog[len(rec.AttemptLog)-1]
	if a.Attempt != rec.Attempts {
		return nil
	}
	switch a.Outcome {
	case store.AttemptStarted, store.AttemptLost, store.AttemptTimedOut:
		return &a
	}
	return nil
}

// IsOutcomeUnknown reports whether op is a step that ended with
// ErrStepOutcomeUnknown.
func IsOutcomeUnknown(op *store.Op) bool {
	return op.Kind == store.OpStep && op.Done && op.Error != nil && op.Error.Type == TypeOutcomeUnknown
}

// outcomeUnknownError is ErrStepOutcomeUnknown with what the history says of
// the attempt.
type outcomeUnknownError struct{ msg string }

func (e *outcomeUnknownError) Error() string { return e.msg }
func (e *outcomeUnknownError) Unwrap() error { return ErrStepOutcomeUnknown }

// outcomeUnknown ends an at-most-once step whose last attempt has no recorded
// outcome (sc.unknown) without running it again: the step is recorded done
// with ErrStepOutcomeUnknown (type step_outcome_unknown), so that every later
// replay returns the same; with FailRunOnUnknown the run then fails with it.
// The message is made of what history holds only, so a replay that repeats
// this (the checkpoint was not made) records the same.
func (sc *stepCall) outcomeUnknown() (*store.Op, bool) {
	a := sc.unknown
	why := "its worker stopped before recording how it ended"
	switch a.Outcome {
	case store.AttemptLost:
		why = "its lease expired while it ran"
	case store.AttemptTimedOut:
		why = "it was ended after its timeout"
	}
	err := &outcomeUnknownError{msg: fmt.Sprintf("%s: attempt %d of at-most-once step %q started at %s and %s; it is not run again",
		ErrStepOutcomeUnknown, a.Attempt, sc.name, a.StartedAt.UTC().Format(time.RFC3339Nano), why)}
	op := sc.finish(nil, err)
	if sc.opts.FailRunOnUnknown {
		sc.rs.failRun(err)
		return nil, false
	}
	return op, true
}

// failed records a failed attempt (started at t0) and, unless the step ends
// with it (stop, with what execute returns), waits out the backoff.
func (sc *stepCall) failed(err error, t0 time.Time) (op *store.Op, stop, ok bool) {
	rs := sc.rs
	att := store.Attempt{Position: sc.pos, Attempt: sc.attempt, Error: *rs.errorInfo(err), StartedAt: t0, FinishedAt: rs.now()}
	retry := sc.retryable(err)
	rs.recordAttempt(sc.op(), att, sc.failedEvent(&att.Error, att.FinishedAt, !retry))
	if !retry {
		sc.failReported = true
		return sc.finish(nil, err), true, true
	}
	delay := sc.opts.Backoff.Delay(sc.attempt)
	if err := sc.pastTotal(delay); err != nil {
		return sc.finish(nil, err), true, true // the next attempt could not start in time
	}
	if !sc.backoff(delay) {
		return nil, true, false
	}
	return nil, false, false
}

// retryable reports whether a failed attempt may be retried.
func (sc *stepCall) retryable(err error) bool {
	if sc.attempt-sc.prior >= sc.opts.MaxAttempts {
		return false
	}
	var nr *nonRetryable
	if errors.As(err, &nr) || errors.Is(err, ErrCancelled) || errors.Is(err, ErrStepTotalTimeout) ||
		errors.Is(err, ErrDeadlineExceeded) || errors.Is(err, ErrPayloadTooLarge) {
		return false
	}
	return !slices.Contains(sc.opts.NonRetryableTypes, sc.rs.errorInfo(err).Type)
}

// flush makes what precedes the step durable before an attempt. A transactional
// step flushes everything, derivable waits included: its transaction then carries
// only the step's op and what async steps queue meanwhile.
func (sc *stepCall) flush() error {
	if sc.txFn == nil {
		return sc.rs.flush()
	}
	_, err := sc.rs.checkpoint(&store.CheckpointParams{Status: store.StatusRunning}, false)
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
	// The result is encoded here, not on the attempt's short-lived goroutine,
	// whose stack would grow for the encoder each time.
	v, err := sc.runAttempt()
	if err == nil {
		res, err = sc.rs.Encode(v)
	}
	return nil, res, err, nil
}

// totalAt is when the step's total timeout passes; zero when it has none.
func (sc *stepCall) totalAt() time.Time {
	if sc.opts.TotalTimeout <= 0 {
		return time.Time{}
	}
	return sc.started.Add(sc.opts.TotalTimeout)
}

// pastTotal returns the step's total timeout error when it passes within wait
// from now, nil otherwise.
func (sc *stepCall) pastTotal(wait time.Duration) error {
	at := sc.totalAt()
	if at.IsZero() || sc.rs.now().Add(wait).Before(at) {
		return nil
	}
	return sc.totalTimeoutError()
}

func (sc *stepCall) totalTimeoutError() error {
	return fmt.Errorf("%w: %s since the first attempt, %d attempt(s)", ErrStepTotalTimeout, sc.opts.TotalTimeout, sc.attempt)
}

// backoff waits delay before the next attempt: in place for a short delay, or by
// suspending the run (releasing the worker slot) for a long one. It reports
// whether to go on.
func (sc *stepCall) backoff(delay time.Duration) bool {
	rs := sc.rs
	if delay > rs.e.cfg.MaxInlineBackoff {
		wake := rs.now().Add(delay)
		reason := fmt.Sprintf("retry backoff: step %q attempt %d at %s", sc.name, sc.attempt+1, reasonTime(wake))
		rs.requestUnwind(unwindSuspend, nil, &wake, reason)
		return false
	}
	t := rs.e.cfg.Clock.NewTimer(delay)
	defer t.Stop()
	cancelled := rs.cancelCtx.Done()
	if sc.detached {
		cancelled = nil
	}
	select {
	case <-t.C():
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
	rs := sc.rs
	at := rs.now()
	op := sc.op()
	op.Done, op.Result, op.FinishedAt = true, result, &at
	if err != nil {
		op.Error = rs.errorInfo(err)
	}
	sc.setAttemptStart(op)
	var ev store.StreamWrite
	switch {
	case err == nil:
		ev = sc.completedEvent(at)
	case !sc.failReported: // ended without a failed attempt (cancelled, out of time)
		ev = sc.failedEvent(op.Error, at, true)
	}
	rs.mu.Lock()
	rs.pending.ops = append(rs.pending.ops, op)
	if ev.Name != "" {
		rs.pending.stream = append(rs.pending.stream, ev)
	}
	rs.mu.Unlock()
	return op
}

// setAttemptStart gives a step that an attempt completed after failed ones
// (op, done without an error), or any at-most-once step an attempt completed,
// the start of that attempt, which the store
// records with the op (store.Op.AttemptStartedAt). It leaves op unchanged for a
// step that failed, succeeded at its first attempt or was not completed by an
// attempt of this execution.
func (sc *stepCall) setAttemptStart(op *store.Op) {
	// An at-most-once step records it from its first attempt on: the row
	// replaces the attempt's started row.
	first := 2
	if sc.atMostOnce() {
		first = 1
	}
	if op.Error != nil || sc.attempt < first || sc.attemptStart.IsZero() {
		return
	}
	t0 := sc.attemptStart
	op.AttemptStartedAt = &t0
}

// attemptContext is the context of one attempt, carrying its StepAttempt.
func (sc *stepCall) attemptContext() (context.Context, stepStopper) {
	rs := sc.rs
	ctx, stop := rs.stepContext(sc.detached, sc.opts.Timeout, sc.totalAt())
	keyPos := sc.pos
	if sc.opts.KeyPositionSet {
		keyPos = sc.opts.KeyPosition
	}
	ctx = context.WithValue(ctx, stepInfoKey{}, &stepValue{rs: rs, StepAttempt: StepAttempt{
		RunID: rs.run.ID, Step: sc.name, Position: sc.pos, Attempt: sc.attempt,
		IdempotencyKey: rs.run.ID + "/" + strconv.Itoa(keyPos),
	}})
	return ctx, stop
}

// runAttempt runs fn once on its own goroutine, so that a step ignoring its
// context is abandoned shortly after the context ends. Context errors are
// mapped to their cause. The step interceptors (Config.InterceptStep) run
// around it on the calling goroutine, whose stack has room for them: run on
// the attempt's goroutine, they made each new goroutine grow and copy its stack.
func (sc *stepCall) runAttempt() (any, error) {
	ctx, stop := sc.attemptContext()
	defer stop.release()
	h := sc.rs.e.cfg.InterceptStep
	if h == nil {
		return sc.spawn(ctx, ctx)
	}
	var v any
	_, err := callSafely(ctx, func(ictx context.Context) (any, error) {
		return nil, h(ictx, sc.rs.run, func(ictx context.Context) error {
			var err error
			v, err = sc.spawn(ctx, ictx)
			return err
		})
	})
	return v, err
}

// spawn runs the step function with context fctx (the attempt's context
// actx, or one an interceptor derived from it) on a goroutine of its own and
// waits for it, or for actx to end and a short grace to pass.
func (sc *stepCall) spawn(actx, fctx context.Context) (any, error) {
	type outcome struct {
		v   any
		err error
	}
	ch := make(chan outcome, 1)
	go func() {
		v, err := callSafely(fctx, sc.fn)
		ch <- outcome{v, err}
	}()
	var o outcome
	select {
	case o = <-ch:
	case <-actx.Done():
		// Wall time: the grace is for a goroutine to return, not workflow time.
		grace := clock.Real{}.NewTimer(stepAbandonGrace)
		select {
		case o = <-ch:
		case <-grace.C():
			o.err = actx.Err()
		}
		grace.Stop()
	}
	if o.err != nil && actx.Err() != nil {
		o.err = sc.contextError(actx, o.err)
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
	case errors.Is(cause, errAttemptTimeout):
		return fmt.Errorf("%w after %s", ErrStepTimeout, sc.opts.Timeout)
	case errors.Is(cause, errTotalTimeout):
		return sc.totalTimeoutError()
	}
	return err
}

// call runs fn for an attempt, inside Config.InterceptStep when it is set, and
// turns a panic of either into an error.
func (sc *stepCall) call(ctx context.Context, fn func(context.Context) (any, error)) (any, error) {
	h := sc.rs.e.cfg.InterceptStep
	if h == nil {
		return callSafely(ctx, fn)
	}
	return callSafely(ctx, func(ctx context.Context) (any, error) {
		var v any
		err := h(ctx, sc.rs.run, func(ctx context.Context) error {
			var err error
			v, err = fn(ctx)
			return err
		})
		return v, err
	})
}

func callSafely(ctx context.Context, fn func(context.Context) (any, error)) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: string(debug.Stack())}
		}
	}()
	return fn(ctx)
}
