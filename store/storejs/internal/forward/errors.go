package forward

import (
	"context"
	"errors"

	"github.com/trellis-dev/trellis/store"
)

// ErrNoLeader is the error of a call that found no leader to take it for
// NoLeaderWait (or until its context ended): no server answered on the
// subject, or those that did were not the leader. Nothing was written; the
// call may be retried. It wraps no store sentinel: the store is not closed,
// only leaderless for now.
var ErrNoLeader = errors.New("no leader answered the forwarded write")

// ErrNotLeader is what a Handler returns (possibly wrapped) when its server is
// not, or no longer, the leader: the caller's Client retries, with another
// server or the same one once it leads again.
var ErrNotLeader = errors.New("this server is not the leader")

// ErrUnknownMethod is the error of a request whose method the leader does not
// know (a Handler returns it, possibly wrapped); nothing was written.
var ErrUnknownMethod = errors.New("unknown forwarded method")

// ErrOutcomeUnknown is the error of a call whose request was sent but whose
// answer never came (its timeout passed, its context ended, the connection
// dropped): the leader may or may not have applied the write. The error also
// wraps the cause (context.DeadlineExceeded, ...).
var ErrOutcomeUnknown = errors.New("outcome unknown: the write may have been applied")

// errCodes is the one table of error codes on the wire: every store sentinel,
// this package's own, and the context's. A handler's error is sent as the code
// of the first entry it matches (errors.Is), or codeInternal.
var errCodes = []struct {
	code string
	err  error
}{
	{"run_not_found", store.ErrRunNotFound},
	{"run_exists", store.ErrRunExists},
	{"run_finished", store.ErrRunFinished},
	{"run_active", store.ErrRunActive},
	{"run_not_blocked", store.ErrRunNotBlocked},
	{"lease_lost", store.ErrLeaseLost},
	{"key_not_found", store.ErrKeyNotFound},
	{"invalid_params", store.ErrInvalidParams},
	{"conflict", store.ErrConflict},
	{"approval_not_found", store.ErrApprovalNotFound},
	{"approval_decided", store.ErrApprovalDecided},
	{"closed", store.ErrClosed},
	{"no_store", store.ErrNoStore},
	{"worker_owned", store.ErrWorkerOwned},
	{"storage_full", store.ErrStorageFull},
	{"token_exists", store.ErrTokenExists},
	{"token_not_found", store.ErrTokenNotFound},
	{"token_inactive", store.ErrTokenInactive},
	{"idempotency_key_not_found", store.ErrIdempotencyKeyNotFound},
	{"idempotency_key_used", store.ErrIdempotencyKeyUsed},
	{"idempotency_key_conflict", store.ErrIdempotencyKeyConflict},
	{"namespace_not_found", store.ErrNamespaceNotFound},
	{"namespace_exists", store.ErrNamespaceExists},
	{"queue_not_found", store.ErrQueueNotFound},
	{"queue_exists", store.ErrQueueExists},
	{"queue_state", store.ErrQueueState},
	{"schedule_not_found", store.ErrScheduleNotFound},
	{"schedule_exists", store.ErrScheduleExists},
	{"schedule_paused", store.ErrSchedulePaused},
	{"schedule_not_paused", store.ErrScheduleNotPaused},
	{"scheduler_not_leader", store.ErrNotLeader}, // the scheduler lease's, not the log's
	{codeNotLeader, ErrNotLeader},
	{"unknown_method", ErrUnknownMethod},
	{"canceled", context.Canceled},
	{"deadline_exceeded", context.DeadlineExceeded},
}

const (
	codeNotLeader = "not_leader"
	// codeInternal: an error of no known sentinel; its message is kept.
	codeInternal = "internal"
)

// wireError is an error on the wire.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// toWire classifies err (nil for nil).
func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	for _, c := range errCodes {
		if errors.Is(err, c.err) {
			return &wireError{Code: c.code, Message: err.Error()}
		}
	}
	return &wireError{Code: codeInternal, Message: err.Error()}
}

// Error is an error the leader returned: its text is the leader's, and
// errors.Is matches the sentinel its code names (none for an unknown code).
// The leader's context errors also match ErrOutcomeUnknown: a store write whose
// context ended may still commit.
type Error struct {
	Code    string
	Message string
	errs    []error // the sentinel and ErrOutcomeUnknown, or nothing
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinels of the error's code.
func (e *Error) Unwrap() []error { return e.errs }

// fromWire rebuilds an error of the wire (nil for nil).
func fromWire(w *wireError) error {
	if w == nil {
		return nil
	}
	e := &Error{Code: w.Code, Message: w.Message}
	for _, c := range errCodes {
		if c.code == w.Code {
			e.errs = []error{c.err}
			if c.err == context.Canceled || c.err == context.DeadlineExceeded {
				e.errs = append(e.errs, ErrOutcomeUnknown)
			}
			break
		}
	}
	return e
}
