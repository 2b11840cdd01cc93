package trellis

import (
	"errors"
	"fmt"
	"strings"

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
	// ErrRunActive: Reset was asked of a run that has not finished (cancel it first).
	ErrRunActive = errors.New("run is still active")
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
	// starts runs of unregistered workflows; see its doc.)
	ErrUnknownWorkflow = errors.New("unknown workflow")
	// ErrInvalidInput: the input cannot be decoded into the workflow's input type.
	ErrInvalidInput = errors.New("invalid workflow input")
	// ErrPayloadTooLarge: an input, result or stored value exceeds Config.MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrCancelled: the run was cancelled. Ops return it once cancellation is seen.
	ErrCancelled = errors.New("run cancelled")
	// ErrDeadlineExceeded: the run's deadline passed. Ops return it, and the run fails with it.
	ErrDeadlineExceeded = errors.New("run deadline exceeded")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("trellis: client closed")
)

// Error types recorded in history for the engine's own errors.
const (
	errTypeCancelled    = "cancelled"
	errTypeDeadline     = "deadline_exceeded"
	errTypeTimeout      = "step_timeout"
	errTypePanic        = "panic"
	errTypePayload      = "payload_too_large"
	errTypeNonDetermism = "non_determinism"
)

// NonDeterminismError reports that workflow code asked for a different op than the
// run's history holds at a position. The run waits in the blocked state until a fixed
// deploy resumes it.
type NonDeterminismError struct {
	Position  int
	Recorded  string // e.g. `step "authorize"`
	Requested string // e.g. `step "capture"`
}

func (e *NonDeterminismError) Error() string {
	return fmt.Sprintf("non-determinism at position %d: history has %s, code asked for %s",
		e.Position, e.Recorded, e.Requested)
}

// StepError is the error a step returns to its workflow once its retries are
// exhausted or the error is non-retryable. It carries the recorded message and type
// rather than the original error, so that a replay sees exactly the same error.
// It unwraps to ErrCancelled, ErrDeadlineExceeded or ErrPayloadTooLarge when the
// step ended for that reason.
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
	case errTypeCancelled:
		return ErrCancelled
	case errTypeDeadline:
		return ErrDeadlineExceeded
	case errTypePayload:
		return ErrPayloadTooLarge
	case errTypeTimeout:
		return ErrStepTimeout
	}
	return nil
}

// nonRetryable marks an error that must not be retried.
type nonRetryable struct{ err error }

func (e *nonRetryable) Error() string { return e.err.Error() }
func (e *nonRetryable) Unwrap() error { return e.err }

// NonRetryable wraps err so that a step returning it fails at once, without retries.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryable{err: err}
}

// errorInfo converts an error into its recorded form.
func errorInfo(err error) *store.ErrorInfo {
	info := &store.ErrorInfo{Message: err.Error(), Type: errorType(err)}
	var nr *nonRetryable
	if errors.As(err, &nr) {
		info.NonRetryable = true
		info.Type = errorType(nr.err)
	}
	var se *StepError
	var pe *panicError
	var te *typedError
	switch {
	case errors.As(err, &te):
		info.Type = te.typ
	case errors.As(err, &pe):
		info.Type = errTypePanic
	case errors.Is(err, ErrStepTimeout):
		info.Type = errTypeTimeout
	case errors.Is(err, ErrCancelled):
		info.Type = errTypeCancelled
	case errors.Is(err, ErrDeadlineExceeded):
		info.Type = errTypeDeadline
	case errors.Is(err, ErrPayloadTooLarge):
		info.Type, info.NonRetryable = errTypePayload, true
	case errors.As(err, &se):
		info.Type = se.Type
	}
	return info
}

// errorType is the Go type recorded for err: the first type along its %w chain
// that says something (e.g. "*net.OpError", "*mypkg.DeclinedError"), skipping the
// anonymous carriers of errors.New, fmt.Errorf, errors.Join and NonRetryable;
// "" when there is none.
func errorType(err error) string {
	for ; err != nil; err = errors.Unwrap(err) {
		switch t := fmt.Sprintf("%T", err); {
		case strings.HasPrefix(t, "*errors."), strings.HasPrefix(t, "*fmt."), t == "*trellis.nonRetryable":
		default:
			return t
		}
	}
	return ""
}
