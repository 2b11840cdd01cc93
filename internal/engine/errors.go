package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// The engine's sentinel errors. The root package exports the same values (its
// ErrCancelled is this ErrCancelled), so errors.Is holds across the boundary.
var (
	ErrCancelled        = errors.New("run cancelled")
	ErrDeadlineExceeded = errors.New("run deadline exceeded")
	ErrPayloadTooLarge  = errors.New("payload too large")
	ErrStepTimeout      = errors.New("step attempt timed out")
	ErrTxNotSupported   = errors.New("the store does not support transactions of the caller")
	ErrEventTimeout     = errors.New("timed out waiting for event")
	ErrApprovalTimeout  = errors.New("approval timed out")
	// ErrStepTotalTimeout is also an ErrStepTimeout (errors.Is matches both).
	ErrStepTotalTimeout error = &childSentinel{msg: "step timed out across its attempts", parent: ErrStepTimeout}
	// ErrStepOutcomeUnknown: an attempt of an at-most-once step started (its
	// start is recorded) and its outcome was never recorded, so the engine
	// does not know whether its effect happened and does not run it again.
	ErrStepOutcomeUnknown = errors.New("step outcome unknown")
)

// childSentinel is a sentinel error that is also another one.
type childSentinel struct {
	msg    string
	parent error
}

func (e *childSentinel) Error() string { return e.msg }
func (e *childSentinel) Unwrap() error { return e.parent }

// Error types recorded in history for the engine's own errors.
const (
	TypeCancelled       = "cancelled"
	TypeDeadline        = "deadline_exceeded"
	TypeTimeout         = "step_timeout"
	TypeTotalTimeout    = "step_total_timeout"
	TypePanic           = "panic"
	TypePayload         = "payload_too_large"
	TypeNonDeterminism  = "non_determinism"
	TypeEventTimeout    = "event_timeout"
	TypeApprovalTimeout = "approval_timeout"
	TypeOutcomeUnknown  = "step_outcome_unknown"
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

// TypedError is an error recorded with an explicit type.
type TypedError struct{ Msg, Type string }

func (e *TypedError) Error() string { return e.Msg }

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

// panicError is a panic in a step, turned into an error (and retried like one).
type panicError struct {
	value any
	stack string
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v\n%s", e.value, e.stack) }

// errorInfo converts an error into its recorded form. typeOf classifies errors of
// the layer above (nil: none).
func errorInfo(err error, typeOf func(error) (string, bool)) *store.ErrorInfo {
	info := &store.ErrorInfo{Message: err.Error(), Type: errorType(err)}
	var nr *nonRetryable
	if errors.As(err, &nr) {
		info.NonRetryable = true
		info.Type = errorType(nr.err)
	}
	var pe *panicError
	var te *TypedError
	switch {
	case errors.As(err, &te):
		info.Type = te.Type
	case errors.As(err, &pe):
		info.Type = TypePanic
	case errors.Is(err, ErrStepOutcomeUnknown):
		info.Type, info.NonRetryable = TypeOutcomeUnknown, true
	case errors.Is(err, ErrStepTotalTimeout):
		info.Type, info.NonRetryable = TypeTotalTimeout, true
	case errors.Is(err, ErrStepTimeout):
		info.Type = TypeTimeout
	case errors.Is(err, ErrCancelled):
		info.Type = TypeCancelled
	case errors.Is(err, ErrDeadlineExceeded):
		info.Type = TypeDeadline
	case errors.Is(err, ErrPayloadTooLarge):
		info.Type, info.NonRetryable = TypePayload, true
	case errors.Is(err, ErrEventTimeout):
		info.Type = TypeEventTimeout
	case errors.Is(err, ErrApprovalTimeout):
		info.Type = TypeApprovalTimeout
	case typeOf != nil:
		if t, ok := typeOf(err); ok {
			info.Type = t
		}
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
		case strings.HasPrefix(t, "*errors."), strings.HasPrefix(t, "*fmt."), t == "*engine.nonRetryable":
		default:
			return t
		}
	}
	return ""
}
