package trellis

import (
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/errs"
	"github.com/trellis-dev/trellis/store"
)

// Errors returned by the client and inside workflows. Test them with errors.Is.
var (
	// ErrRunNotFound: no run matches the ID.
	ErrRunNotFound = store.ErrRunNotFound
	// ErrRunExists: a run with the same workflow ID exists and the reuse policy
	// rejects the start (by default: while that run is active).
	ErrRunExists = store.ErrRunExists
	// ErrRunFinished: the run already reached a final state.
	ErrRunFinished = store.ErrRunFinished
	// ErrRunActive: Reset or Delete was asked of a run that has not finished
	// (cancel it first).
	ErrRunActive = store.ErrRunActive
	// ErrRunNotBlocked: Resume was asked of a run that is not blocked.
	ErrRunNotBlocked = store.ErrRunNotBlocked
	// ErrLeaseLost: a worker wrote with a stale lease token; the write was rejected.
	ErrLeaseLost = store.ErrLeaseLost
	// ErrKeyNotFound: the run store has no such key.
	ErrKeyNotFound = store.ErrKeyNotFound
	// ErrInvalidParams: a parameter is missing or malformed.
	ErrInvalidParams = store.ErrInvalidParams
	// ErrApprovalNotFound: no approval request has this ID.
	ErrApprovalNotFound = store.ErrApprovalNotFound
	// ErrApprovalDecided: the approval request was already decided, or expired.
	ErrApprovalDecided = store.ErrApprovalDecided
	// ErrUnknownWorkflow: no workflow with that name is registered. (StartRaw
	// starts runs of unregistered workflows, and CreateSchedule takes them; see
	// their docs.)
	ErrUnknownWorkflow = errs.ErrUnknownWorkflow
	// ErrInvalidInput: the input cannot be decoded into the workflow's input type.
	ErrInvalidInput = errs.ErrInvalidInput
	// ErrHistoryFormat: ParseHistory was given a document that is not a history
	// of a format it knows (docs/history-format.md).
	ErrHistoryFormat = errors.New("not a trellis history")
	// ErrPayloadTooLarge: an input, result or stored value exceeds Config.MaxPayloadBytes.
	ErrPayloadTooLarge = engine.ErrPayloadTooLarge
	// ErrCancelled: the run was cancelled. Ops return it once cancellation is seen.
	ErrCancelled = engine.ErrCancelled
	// ErrDeadlineExceeded: the run's deadline passed. Ops return it, and the run fails with it.
	ErrDeadlineExceeded = engine.ErrDeadlineExceeded
	// ErrStepTimeout: a step attempt ran longer than StepOptions.Timeout. It is
	// retried like any other error.
	ErrStepTimeout = engine.ErrStepTimeout
	// ErrStepTotalTimeout: a step ran out of StepOptions.TotalTimeout across its
	// attempts and backoffs; it is not retried. It is also an ErrStepTimeout.
	ErrStepTotalTimeout = engine.ErrStepTotalTimeout
	// ErrStepOutcomeUnknown: an attempt of an at-most-once step
	// (StepOptions.AtMostOnce) started and its outcome was never recorded (its
	// worker crashed, its lease expired, it was ended after its timeout), so
	// the step is not run again. The step's error (a *StepError of type
	// "step_outcome_unknown") is it, and so is the run's when the step's
	// OnUnknown policy fails the run.
	ErrStepOutcomeUnknown = engine.ErrStepOutcomeUnknown
	// ErrClosed: the client, or the store under it, was closed.
	ErrClosed = store.ErrClosed
	// ErrStorageFull: a start was refused because the store's volume has too
	// little free space left for the running runs to finish (the SQLite
	// store's disk reserve, see docs/storage.md, "A full disk"); nothing was written.
	// Running runs go on; starts succeed again once space is freed.
	ErrStorageFull = store.ErrStorageFull
	// ErrNamespaceNotFound: the namespace has no record (see docs/queues.md).
	ErrNamespaceNotFound = store.ErrNamespaceNotFound
	// ErrNamespaceExists: CreateNamespace of a namespace that has a record.
	ErrNamespaceExists = store.ErrNamespaceExists
	// ErrQueueNotFound: the queue has no record.
	ErrQueueNotFound = store.ErrQueueNotFound
	// ErrQueueExists: CreateQueue of a queue that has a record.
	ErrQueueExists = store.ErrQueueExists
	// ErrQueueState: pausing a paused queue, or resuming one that is not paused.
	ErrQueueState = store.ErrQueueState

	// Errors of a client on a server (Config.Server); see docs/http-api.md,
	// "Errors". The server answers each with its own problem code, and
	// a client on a server returns the same sentinel (internal/problem).

	// ErrUnauthenticated: the server knows no such token (or none was given).
	ErrUnauthenticated = auth.ErrUnauthenticated
	// ErrPermissionDenied: the token's principal lacks the role the call needs.
	ErrPermissionDenied = errs.ErrPermissionDenied
	// ErrUnavailable: the server cannot be reached, or its store does not answer,
	// after the client's retries.
	ErrUnavailable = errs.ErrUnavailable
	// ErrRateLimited: the server refused the call for now; retry later.
	ErrRateLimited = errs.ErrRateLimited
	// ErrIdempotencyKeyConflict: an Idempotency-Key was reused with another request.
	ErrIdempotencyKeyConflict = store.ErrIdempotencyKeyConflict
	// ErrRemoteUnsupported: the method has no route in the HTTP API (claims,
	// checkpoints and leases belong to the worker protocol; transactions cannot
	// span a server).
	ErrRemoteUnsupported = errors.New("not supported by a client on a server")
)

// NonDeterminismError reports that workflow code asked for a different op than the
// run's history holds at a position: Position, Recorded (e.g. `step "authorize"`)
// and Requested (e.g. `step "capture"`). The run waits in the blocked state until
// a fixed deploy resumes it.
type NonDeterminismError = engine.NonDeterminismError

// StepError is the error a step returns to its workflow once its retries are
// exhausted or the error is non-retryable. It carries the recorded message and type
// rather than the original error, so that a replay sees exactly the same error.
// It unwraps to ErrCancelled, ErrDeadlineExceeded, ErrPayloadTooLarge or
// ErrStepOutcomeUnknown when the step ended for that reason.
type StepError struct {
	Step     string
	Attempts int
	Message  string
	// Type is an engine code (e.g. "step_timeout"), or the Go type of the original
	// error or of an error it wraps with %w (e.g. "*net.OpError"); empty for a
	// plain errors.New or fmt.Errorf error.
	Type string
}

func (e *StepError) Error() string {
	if e.Attempts == 0 { // ended before its first attempt (a cancellation, a passed deadline)
		return fmt.Sprintf("step %q did not run: %s", e.Step, e.Message)
	}
	return fmt.Sprintf("step %q failed after %d attempt(s): %s", e.Step, e.Attempts, e.Message)
}

func (e *StepError) Unwrap() error { return sentinelFor(e.Type) }

// RunError is the error Result returns for a run that failed or was cancelled.
type RunError struct {
	RunID   string
	Status  Status
	Message string
	Type    string
}

func (e *RunError) Error() string {
	return fmt.Sprintf("run %s %s: %s", e.RunID, e.Status, e.Message)
}

func (e *RunError) Unwrap() error { return sentinelFor(e.Type) }

func sentinelFor(typ string) error {
	switch typ {
	case engine.TypeCancelled:
		return ErrCancelled
	case engine.TypeDeadline:
		return ErrDeadlineExceeded
	case engine.TypePayload:
		return ErrPayloadTooLarge
	case engine.TypeTimeout:
		return ErrStepTimeout
	case engine.TypeEventTimeout:
		return ErrEventTimeout
	case engine.TypeApprovalTimeout:
		return ErrApprovalTimeout
	case engine.TypeTotalTimeout:
		return ErrStepTotalTimeout
	case engine.TypeOutcomeUnknown:
		return ErrStepOutcomeUnknown
	}
	return nil
}

// NonRetryable wraps err so that a step returning it fails at once, without retries.
func NonRetryable(err error) error { return engine.NonRetryable(err) }

// errorType is the recorded type of the errors of this package that carry one,
// for the engine.
func errorType(err error) (string, bool) {
	var se *StepError
	if errors.As(err, &se) {
		return se.Type, true
	}
	return "", false
}
