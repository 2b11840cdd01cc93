package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"

	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
)

// Execute replays a claimed run from the start of its history and carries it on
// until it finishes, waits, blocks or is handed back.
func (e *Engine) Execute(ctx context.Context, cr *store.ClaimedRun, ctl *worker.Control) {
	e.ExecuteOutcome(ctx, cr, ctl)
}

// Outcome is what an execution of a run saved.
type Outcome struct {
	// Status is the status the execution left the run in: a final one, waiting,
	// blocked, or pending (handed back); "" when it saved nothing (the lease was
	// lost, the store failed, or the workflow is not registered here).
	Status store.Status
	// Error is the run's error when it ended failed or cancelled.
	Error *store.ErrorInfo
}

// ExecuteOutcome is Execute, reporting what the execution saved.
func (e *Engine) ExecuteOutcome(ctx context.Context, cr *store.ClaimedRun, ctl *worker.Control) (oc Outcome) {
	def, ok := e.cfg.Lookup(cr.Run.Workflow)
	if !ok { // claims are filtered by registered names; be safe anyway
		_ = e.cfg.Store.LeaseRelease(context.WithoutCancel(ctx), &store.LeaseReleaseParams{
			Lease: cr.Lease(), Seq: 1})
		return oc
	}
	if def.Job != nil {
		return e.executeJob(ctx, cr, ctl, def.Job)
	}
	var final *store.Run
	e.local.begin(cr.Run.ID)
	defer func() {
		e.local.end(cr.Run.ID, final)
		if e.cfg.OnEnd != nil {
			e.cfg.OnEnd(cr.Run.ID, final)
		}
		if final != nil {
			oc = Outcome{Status: final.Status, Error: final.Error}
		}
	}()
	cancelCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A cancellation cancels cancelCtx; no goroutine per run waits for it.
	defer ctl.OnCancel(func() { cancel(ErrCancelled) })()
	rs := newRunState(e, cr, ctx, ctl)
	rs.cancelCtx = cancelCtx
	if e.cfg.Logger.Enabled(ctx, slog.LevelDebug) { // no allocations for a line nobody reads
		rs.log().Debug("executing run", "history", len(cr.History))
	}
	rs.retry = def.Retry
	if d := cr.Run.Deadline; d != nil && !rs.now().Before(*d) {
		rs.deadlineHit = true
		final, oc.Status = rs.finish(nil, ErrDeadlineExceeded)
		return oc
	}
	out, err, returned := rs.runWorkflow(def)
	rs.inflight.Wait()
	if ferr := rs.failure(); ferr != nil {
		// Whether or not the function returned: an at-most-once step failed
		// the run (StepOptions.FailRunOnUnknown).
		final, oc.Status = rs.finish(nil, ferr)
		return oc
	}
	if !returned {
		oc.Status = rs.saveUnwind()
		return oc
	}
	final, oc.Status = rs.finish(out, err)
	return oc
}

// runWorkflow calls the workflow function on its own goroutine and waits for it. It
// reports returned=false when the goroutine was unwound (Goexit) rather than returning.
//
// With step interceptors (tracing, metrics, the user's), the goroutine grows its
// stack as it starts: a step span's start needs about 2 KiB of stack below the
// step's frames, and growing there, deep in the workflow, copied every frame
// (450 ms of w1's CPU per 60,000 runs with tracing, 70 ms grown ahead). Without
// them, most workflow goroutines never need more than their first stack.
func (rs *RunState) runWorkflow(def *Definition) (out []byte, err error, returned bool) {
	done := make(chan struct{})
	grow := rs.e.cfg.InterceptStep != nil
	go func() {
		if grow {
			GrowStack()
		}
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				err, returned = fmt.Errorf("workflow panicked: %v\n%s", r, debug.Stack()), true
				rs.mu.Lock()
				rs.panicked = true
				rs.mu.Unlock()
			}
		}()
		out, err = def.Run(rs, rs.run.Input)
		returned = true
	}()
	<-done
	return out, err, returned
}

// saveUnwind saves the state of a run whose workflow goroutine was unwound and
// returns the status it saved ("" when none).
func (rs *RunState) saveUnwind() store.Status {
	rs.mu.Lock()
	kind, uerr, wakeAt, reason, events := rs.unwind, rs.unwindErr, rs.wakeAt, rs.waitReason, rs.waitEvents
	rs.mu.Unlock()
	p := &store.CheckpointParams{}
	switch kind {
	case unwindBlocked:
		info := rs.errorInfo(uerr)
		info.Type = TypeNonDeterminism
		p.Status, p.Error = store.StatusBlocked, info
		p.Stream = append(p.Stream, lifecycle(store.StreamRunBlocked, errorEvent{Error: info}))
		rs.log().Error("run blocked: its code no longer matches its history; deploy a fix, then resume it",
			"err", uerr)
		if rs.e.cfg.OnBlock != nil {
			rs.e.cfg.OnBlock(rs.run, uerr)
		}
	case unwindSuspend:
		if d := rs.run.Deadline; d != nil && (wakeAt == nil || d.Before(*wakeAt)) {
			wakeAt = d
		}
		p.Status, p.WakeAt, p.WaitReason, p.WaitEvents = store.StatusWaiting, wakeAt, reason, slices.Compact(slices.Sorted(slices.Values(events)))
		p.Stream = append(p.Stream, lifecycle(store.StreamRunWaiting, waitingEvent{Reason: reason, WakeAt: wakeAt, Events: p.WaitEvents}))
		rs.log().Debug("run waiting", "reason", reason)
	case unwindHandBack:
		p.Status = store.StatusPending
		rs.log().Info("handing back run", "cause", context.Cause(rs.ctx))
	default: // abandoned: the lease is lost or the store fails; write nothing
		if uerr == nil {
			uerr = context.Cause(rs.ctx)
		}
		rs.log().Warn("abandoning run: lease lost or store failing; another worker will take it over", "err", uerr)
		return ""
	}
	_, err := rs.checkpoint(p, true)
	if errors.Is(err, store.ErrConflict) {
		if rs.handBack() {
			return store.StatusPending
		}
		return ""
	}
	if err != nil {
		rs.log().Warn("saving run state", "status", p.Status, "err", err)
		return ""
	}
	return p.Status
}

// handBack makes the run pending again with nothing more recorded, so that it is
// replayed (after a checkpoint was refused with store.ErrConflict).
// It reports whether that was saved.
func (rs *RunState) handBack() bool {
	if _, err := rs.checkpoint(&store.CheckpointParams{Status: store.StatusPending}, true); err != nil {
		rs.log().Warn("handing back run", "err", err)
		return false
	}
	return true
}

// finish saves the outcome of a workflow function that returned, and returns the
// run as saved (nil if it could not be saved, or did not finish: a failure the
// store made a workflow retry leaves it waiting, the status returned).
func (rs *RunState) finish(out []byte, err error) (*store.Run, store.Status) {
	rs.mu.Lock()
	cancelled, deadline, panicked := rs.cancelSeen, rs.deadlineHit, rs.panicked
	rs.mu.Unlock()
	p := &store.CheckpointParams{Status: store.StatusSucceeded, Output: out}
	limit := rs.limit
	switch {
	case deadline:
		p.Status, p.Output, p.Error = store.StatusFailed, nil, rs.errorInfo(ErrDeadlineExceeded)
	case err != nil && (cancelled || errors.Is(err, ErrCancelled) && rs.Cancelled()):
		// Cancelled only when the run's cancellation was asked for: an error
		// that wraps ErrCancelled otherwise (another run's, a step's) fails it.
		p.Status, p.Error = store.StatusCancelled, rs.errorInfo(err)
		p.Error.Type = TypeCancelled
	case err != nil:
		p.Status, p.Error = store.StatusFailed, rs.errorInfo(err)
		if panicked {
			p.Error.Type = TypePanic
		}
	case len(out) > limit:
		p.Status, p.Output = store.StatusFailed, nil
		p.Error = rs.errorInfo(fmt.Errorf("%w: output is %d bytes (%slimit %d)", ErrPayloadTooLarge, len(out), rs.limitOf, limit))
	}
	rs.mu.Lock()
	for id := range rs.openApprovals {
		// Nobody can decide for a finished run: its open requests expire with it.
		p.ExpireApprovals = append(p.ExpireApprovals, id)
	}
	rs.mu.Unlock()
	slices.Sort(p.ExpireApprovals)
	p.Stream = append(p.Stream, store.FinalEvent(p.Status, p.Output, p.Error))
	if p.Status == store.StatusFailed {
		p.Retry = rs.retry // the store applies it, unless the run has a policy of its own
	}
	res, err := rs.checkpoint(p, true)
	if errors.Is(err, store.ErrConflict) {
		// A wait timed out while its event arrived: replay with the new inbox.
		_ = rs.handBack()
		return nil, ""
	}
	if err != nil {
		rs.log().Warn("saving run outcome", "status", p.Status, "err", err)
		return nil, ""
	}
	if res.RetryAt != nil {
		rs.log().Info("run attempt failed; retrying", "workflow_attempt", rs.run.WorkflowAttempt, "retry_at", *res.RetryAt, "err", p.Error.Message)
		return nil, store.StatusWaiting
	}
	if res.Replayed && p.Status == store.StatusFailed && (p.Retry != nil || rs.run.Retry != nil) {
		// The failure was written before (its answer was lost), perhaps as a
		// retry: the store says how the run is, not this process.
		return nil, ""
	}
	return store.FinalRun(rs.run, p, res), p.Status
}
