package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/trellis-dev/trellis/internal/protocol"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
)

// Job is the one function of a job: a run with one step and no workflow code
// around it. It needs no replay: a claim calls Fn once and one checkpoint
// records its outcome. Fn decodes the input and encodes the output itself.
type Job struct {
	Fn func(ctx context.Context, codec Codec, input []byte) ([]byte, error)
	// Options are the job's retry policy and attempt timeout, defaults applied
	// (TotalTimeout is not used).
	Options StepOptions
}

// jobPosition is where a job's one op is recorded, once it has failed an
// attempt: a job that succeeds at its first attempt records no op at all.
const jobPosition = 0

// executeJob runs one attempt of a job and records its outcome in one
// checkpoint: succeeded, failed, or waiting for the next attempt. It reports
// what it saved, as ExecuteOutcome does.
func (e *Engine) executeJob(ctx context.Context, cr *store.ClaimedRun, ctl *worker.Control, job *Job) (oc Outcome) {
	GrowStack()
	if cr.QueueRetry != nil {
		j := *job
		j.Options = j.Options.withQueue(cr.QueueRetry)
		job = &j
	}
	run := cr.Run
	lease := cr.Lease()
	var final *store.Run
	e.local.begin(run.ID)
	defer func() {
		e.local.end(run.ID, final)
		if e.cfg.OnEnd != nil {
			e.cfg.OnEnd(run.ID, final)
		}
	}()
	// The attempt number comes from the recorded op: a claim handed back at
	// shutdown costs no attempt; one lost to a crash while the job ran costs
	// one (the claim that took the run back recorded it lost). History is only read on claims
	// after the first, so a first attempt reads nothing.
	attempt, prior := 1, (*store.Op)(nil)
	for _, op := range cr.History {
		if op.Position == jobPosition && op.Kind == store.OpStep {
			prior, attempt = op, op.Attempts+1
		}
	}
	now := e.cfg.Clock.Now()
	if a := endedAttempt(prior); a != nil && (a.Attempt >= job.Options.MaxAttempts || slices.Contains(job.Options.NonRetryableTypes, a.Error.Type)) {
		// Its last attempt was lost or timed out (recorded by the claim) and
		// was the last the policy allows: the job fails with its error.
		final, oc = e.jobSave(ctx, cr, ctl, e.jobEnded(run, prior, a))
		return oc
	}
	if d := run.Deadline; d != nil && !now.Before(*d) {
		final, oc = e.jobSave(ctx, cr, ctl, e.jobOutcome(run, job, prior, attempt, now, nil, ErrDeadlineExceeded, false))
		return oc
	}
	select {
	case <-ctl.CancelRequested():
		// Cancelled while it waited (e.g. for a retry's backoff): no new attempt.
		final, oc = e.jobSave(ctx, cr, ctl, e.jobOutcome(run, job, prior, attempt, now, nil, ErrCancelled, true))
		return oc
	default:
	}
	out, err, cancelled := e.jobAttempt(ctx, run, ctl, job, attempt)
	if err != nil && ctx.Err() != nil && !cancelled {
		// The worker stops (hand the run back) or the lease is lost (write nothing).
		if errors.Is(context.Cause(ctx), worker.ErrShutdown) {
			if err := e.cfg.Store.LeaseRelease(context.WithoutCancel(ctx), &store.LeaseReleaseParams{Lease: lease, Seq: 1}); err != nil {
				runLogger(e.cfg.Logger, run).Warn("handing back job", "step", run.Workflow, "attempt", attempt, "err", err)
				return oc
			}
			return Outcome{Status: store.StatusPending}
		}
		return oc
	}
	if limit, of := e.payloadLimit(cr); err == nil && len(out) > limit {
		err = fmt.Errorf("%w: output is %d bytes (%slimit %d)", ErrPayloadTooLarge, len(out), of, limit)
	}
	final, oc = e.jobSave(ctx, cr, ctl, e.jobOutcome(run, job, prior, attempt, now, out, err, cancelled))
	return oc
}

// jobAttempt calls the job's function with the run's cancellation, the
// attempt's timeout and its attempt info, recovering a panic.
func (e *Engine) jobAttempt(ctx context.Context, run *store.Run, ctl *worker.Control, job *Job, attempt int) (out []byte, err error, cancelled bool) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A cancellation cancels the attempt's context; no goroutine waits for it.
	defer ctl.OnCancel(func() { cancel(ErrCancelled) })()
	if d := run.Deadline; d != nil {
		var c2 context.CancelFunc
		actx, c2 = context.WithDeadlineCause(actx, *d, ErrDeadlineExceeded)
		defer c2()
	}
	if t := job.Options.Timeout; t > 0 {
		var c3 context.CancelFunc
		actx, c3 = context.WithTimeoutCause(actx, t, fmt.Errorf("%w after %s", ErrStepTimeout, t))
		defer c3()
	}
	actx = context.WithValue(actx, stepInfoKey{}, &stepValue{StepAttempt: StepAttempt{
		RunID: run.ID, Step: run.Workflow, Position: jobPosition, Attempt: attempt,
		IdempotencyKey: run.ID + "/" + strconv.Itoa(jobPosition),
	}})
	cur := ctl.StepStarted(run.Workflow, jobPosition, attempt, e.cfg.Clock.Now(), job.Options.Timeout)
	func() {
		defer func() {
			if r := recover(); r != nil {
				out, err = nil, &panicError{value: r, stack: string(debug.Stack())}
			}
		}()
		out, err = job.Fn(actx, e.cfg.Codec, run.Input)
	}()
	ctl.StepEnded(cur)
	if err != nil {
		if cause := context.Cause(actx); actx.Err() != nil && ctx.Err() == nil && cause != nil {
			cancelled = errors.Is(cause, ErrCancelled)
			if errors.Is(cause, ErrDeadlineExceeded) || errors.Is(cause, ErrStepTimeout) || cancelled {
				if err == actx.Err() { // the context's own error says nothing the cause does not
					err = cause
				} else {
					err = fmt.Errorf("%w: %w", cause, err)
				}
			}
		}
	}
	return out, err, cancelled
}

// jobOutcome is the checkpoint that records an attempt's outcome. A failure
// with attempts left makes the run wait for its backoff, releasing the slot.
func (e *Engine) jobOutcome(run *store.Run, job *Job, prior *store.Op, attempt int, t0 time.Time, out []byte, err error, cancelled bool) *store.CheckpointParams {
	if err == nil {
		p := &store.CheckpointParams{Status: store.StatusSucceeded, Output: out}
		if prior != nil { // earlier attempts failed: close the op they opened, with this attempt's start
			end := e.cfg.Clock.Now()
			p.Ops = []*store.Op{{Position: jobPosition, Kind: store.OpStep, Name: run.Workflow, Done: true,
				Result: out, Attempts: attempt, StartedAt: prior.StartedAt, FinishedAt: &end, AttemptStartedAt: &t0}}
		}
		return p
	}
	info := errorInfo(err, e.cfg.ErrorType)
	end := e.cfg.Clock.Now()
	started := t0
	if prior != nil {
		started = prior.StartedAt
	}
	op := &store.Op{Position: jobPosition, Kind: store.OpStep, Name: run.Workflow, Attempts: attempt, StartedAt: started}
	p := &store.CheckpointParams{
		Ops:      []*store.Op{op},
		Attempts: []store.Attempt{{Position: jobPosition, Attempt: attempt, Error: *info, StartedAt: t0, FinishedAt: end}},
	}
	// Attempts made in earlier attempts of the run (workflow retries, which
	// a run started with a policy gets) do not count.
	retry := !cancelled && attempt-min(run.PriorAttempts(jobPosition), attempt-1) < job.Options.MaxAttempts && !info.NonRetryable &&
		!errors.Is(err, ErrDeadlineExceeded) && !errors.Is(err, ErrPayloadTooLarge) && !errors.Is(err, ErrCancelled) &&
		!slices.Contains(job.Options.NonRetryableTypes, info.Type)
	if retry {
		wake := end.Add(job.Options.Backoff.Delay(attempt))
		if d := run.Deadline; d != nil && d.Before(wake) {
			wake = *d
		}
		p.Status, p.WakeAt, p.WaitReason = store.StatusWaiting, &wake, "retry backoff"
		return p
	}
	op.Done, op.Error, op.FinishedAt = true, info, &end
	p.Status, p.Error = store.StatusFailed, info
	if cancelled {
		p.Status = store.StatusCancelled
		p.Error.Type = TypeCancelled
	}
	return p
}

// endedAttempt is op's last attempt when it ended without its worker (lost or
// timed out, recorded by a claim); nil otherwise.
func endedAttempt(op *store.Op) *store.Attempt {
	if op == nil || len(op.AttemptLog) == 0 {
		return nil
	}
	a := &op.AttemptLog[len(op.AttemptLog)-1]
	if a.Attempt != op.Attempts || (a.Outcome != store.AttemptLost && a.Outcome != store.AttemptTimedOut) {
		return nil
	}
	return a
}

// jobEnded is the checkpoint that fails a job whose last attempt, lost or
// timed out, used up its attempts: its op done with that attempt's error.
func (e *Engine) jobEnded(run *store.Run, prior *store.Op, a *store.Attempt) *store.CheckpointParams {
	end := e.cfg.Clock.Now()
	info := a.Error
	op := &store.Op{Position: jobPosition, Kind: store.OpStep, Name: run.Workflow, Attempts: prior.Attempts,
		StartedAt: prior.StartedAt, Done: true, Error: &info, FinishedAt: &end}
	return &store.CheckpointParams{Ops: []*store.Op{op}, Status: store.StatusFailed, Error: &info}
}

// jobSave writes a job's checkpoint and returns the run as saved when it
// finished (nil otherwise), and what it saved (nothing when it failed).
func (e *Engine) jobSave(ctx context.Context, cr *store.ClaimedRun, ctl *worker.Control, p *store.CheckpointParams) (*store.Run, Outcome) {
	run := cr.Run
	p.Lease, p.Seq = cr.Lease(), 1 // a job's lease writes once (store.CheckpointParams.Seq)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CheckpointTimeout)
	defer cancel()
	if ProtocolViolation != nil {
		asked := run.CancelRequested
		select {
		case <-ctl.CancelRequested():
			asked = true
		default:
		}
		checkProtocol(run, protocol.NewRecorded(cr.History, asked), p)
	}
	res, err := e.cfg.Store.Checkpoint(cctx, p)
	if err != nil {
		runLogger(e.cfg.Logger, run).Warn("saving job outcome", "status", p.Status, "err", err)
		return nil, Outcome{}
	}
	oc := Outcome{Status: p.Status, Error: p.Error}
	if res.RetryAt != nil { // the store made the failure a workflow retry
		return nil, Outcome{Status: store.StatusWaiting}
	}
	if !p.Status.Terminal() {
		return nil, oc
	}
	return store.FinalRun(run, p, res), oc
}

// GrowStack grows the calling goroutine's stack from its first 2 KiB to 8 KiB
// while it holds a few frames. A job's goroutine needs that much once the job
// decodes its input (encoding/json is deep), and growing there copies every
// frame below and fixes up their pointers: 5 µs of CPU per one-step job (w5),
// a twentieth of the process's. (A workflow's run goroutine only waits for the
// workflow's own goroutine, and grown ahead, it cost w1 more than it saved,
// unless interceptors wrap the engine: the client's executor grows it then; the
// workflow's goroutine grows ahead when steps are intercepted, see runWorkflow.)
//
//go:noinline
func GrowStack() {
	var frame [3 << 10]byte // with the stack guard, more than 4 KiB: the stack doubles twice
	keep(frame[:])
}

// keep makes its argument live, so that the compiler keeps GrowStack's frame.
//
//go:noinline
func keep(b []byte) { b[0] = 0 }
