package workerwire

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/errs"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/store"
)

// Stable reasons of the worker protocol's errors (ErrorDetail.reason).
const (
	ReasonLeaseLost        = "LEASE_LOST"
	ReasonRunNotFound      = "RUN_NOT_FOUND"
	ReasonRunExists        = "RUN_EXISTS"
	ReasonRunFinished      = "RUN_FINISHED"
	ReasonRunNotBlocked    = "RUN_NOT_BLOCKED"
	ReasonKeyNotFound      = "KEY_NOT_FOUND"
	ReasonInvalidParams    = "INVALID_PARAMS"
	ReasonConflict         = "CONFLICT"
	ReasonKeyConflict      = "IDEMPOTENCY_KEY_CONFLICT"
	ReasonClosed           = "CLOSED"
	ReasonUnauthenticated  = "UNAUTHENTICATED"
	ReasonPermissionDenied = "PERMISSION_DENIED"
	ReasonWorkerOwned      = "WORKER_OWNED"
	ReasonUnavailable      = "UNAVAILABLE"
	ReasonRateLimited      = "RATE_LIMITED"
	ReasonInternal         = "INTERNAL"
)

// sentinel pairs a store error with its Connect code and reason.
type sentinel struct {
	err    error
	code   connect.Code
	reason string
}

var sentinels = []sentinel{
	{store.ErrLeaseLost, connect.CodeAborted, ReasonLeaseLost},
	{store.ErrRunNotFound, connect.CodeNotFound, ReasonRunNotFound},
	{store.ErrRunExists, connect.CodeAlreadyExists, ReasonRunExists},
	{store.ErrRunFinished, connect.CodeFailedPrecondition, ReasonRunFinished},
	{store.ErrRunNotBlocked, connect.CodeFailedPrecondition, ReasonRunNotBlocked},
	{store.ErrKeyNotFound, connect.CodeNotFound, ReasonKeyNotFound},
	{store.ErrInvalidParams, connect.CodeInvalidArgument, ReasonInvalidParams},
	{store.ErrConflict, connect.CodeAborted, ReasonConflict},
	{store.ErrIdempotencyKeyConflict, connect.CodeFailedPrecondition, ReasonKeyConflict},
	{store.ErrClosed, connect.CodeUnavailable, ReasonClosed},
	{auth.ErrUnauthenticated, connect.CodeUnauthenticated, ReasonUnauthenticated},
	{ErrPermissionDenied, connect.CodePermissionDenied, ReasonPermissionDenied},
	{store.ErrWorkerOwned, connect.CodePermissionDenied, ReasonWorkerOwned},
	{ErrRateLimited, connect.CodeResourceExhausted, ReasonRateLimited},
}

// ErrRateLimited is the error of a call refused because the server has as many
// requests in flight as it takes (server.Config.MaxInFlight); retry it.
var ErrRateLimited = errs.ErrRateLimited

// ErrPermissionDenied is the error of a call the token's principal may not make.
var ErrPermissionDenied = errs.ErrPermissionDenied

// Detail classifies err: its Connect code and reason. Errors that are none of
// the contract's are internal, or unavailable when a context ended.
func Detail(err error) (connect.Code, *pb.ErrorDetail) {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.code, &pb.ErrorDetail{Reason: s.reason, Message: err.Error(), Code: s.code.String()}
		}
	}
	code, reason := connect.CodeInternal, ReasonInternal
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		code, reason = connect.CodeUnavailable, ReasonUnavailable
	}
	return code, &pb.ErrorDetail{Reason: reason, Message: err.Error(), Code: code.String()}
}

// ToConnect turns a server-side error into a Connect error carrying its
// ErrorDetail.
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code, d := Detail(err)
	// The Connect error's text is its code and its message: a message that
	// starts with the code's name ("unauthenticated: unknown, revoked or
	// expired token", auth.ErrUnauthenticated's text) would print it twice in
	// every client. The ErrorDetail keeps the whole message.
	ce = connect.NewError(code, errors.New(strings.TrimPrefix(d.Message, code.String()+": ")))
	if det, derr := connect.NewErrorDetail(d); derr == nil {
		ce.AddDetail(det)
	}
	return ce
}

// Error is an error the server returned: errors.Is matches the store sentinel
// its reason names.
type Error struct {
	Code    connect.Code
	Reason  string
	Message string
	err     error // the sentinel, or nil
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinel the reason names (nil when none).
func (e *Error) Unwrap() error { return e.err }

// FromDetail rebuilds the error of an ErrorDetail.
func FromDetail(d *pb.ErrorDetail) error {
	if d == nil {
		return nil
	}
	e := &Error{Reason: d.Reason, Message: d.Message}
	for _, s := range sentinels {
		if s.reason == d.Reason {
			e.Code, e.err = s.code, s.err
		}
	}
	if e.err == nil {
		e.Code = connect.CodeInternal
		if d.Reason == ReasonUnavailable {
			e.Code = connect.CodeUnavailable
		}
	}
	return e
}

// FromConnect rebuilds a client-side error: the sentinel of the detail's
// reason when the error carries one, else the Connect error itself (a
// transport failure: connection refused, timeout).
func FromConnect(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	for _, det := range ce.Details() {
		v, derr := det.Value()
		if d, ok := v.(*pb.ErrorDetail); derr == nil && ok {
			e := FromDetail(d).(*Error)
			e.Code = ce.Code()
			return e
		}
	}
	return err
}
