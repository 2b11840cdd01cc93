// Package problem is the one table of the HTTP API's errors: each sentinel
// error has one problem code and one HTTP status, and each code one sentinel
// (docs/http-api.md, "Errors"). The server writes problems with it and
// the remote client reads them back with it, so errors.Is holds against a
// server as against a store, and neither side compares titles.
package problem

import (
	"context"
	"errors"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/errs"
	"github.com/trellis-dev/trellis/store"
)

// TypeBase prefixes a problem's code to form its type URI: the code's
// section of docs/http-api.md (each code has a heading of its own there, so
// the anchor resolves; a test checks it).
const TypeBase = "https://github.com/trellis-dev/trellis/blob/main/docs/http-api.md#"

// Internal is the code of an error the table does not know (a bug, a store
// failure): its text is not shown.
const Internal = "internal"

// Entry is one kind of error answer.
type Entry struct {
	Err    error // the sentinel: errors.Is(answered error, Err)
	Status int   // the HTTP status
	Code   string
	Title  string // a short, stable summary for people
}

// Type is the entry's type URI.
func (e Entry) Type() string { return TypeBase + e.Code }

// table maps errors one to one to codes. errors.Is tries the entries in order
// and the first match wins, so a sentinel that is a narrower case of another
// (errs.ErrRequestTimeout is an errs.ErrUnavailable) comes before it.
var table = []Entry{
	{auth.ErrUnauthenticated, 401, "unauthenticated", "Unauthenticated"},
	{errs.ErrPermissionDenied, 403, "permission_denied", "Permission denied"},
	{store.ErrRunNotFound, 404, "run_not_found", "Run not found"},
	{store.ErrKeyNotFound, 404, "key_not_found", "Key not found"},
	{store.ErrApprovalNotFound, 404, "approval_not_found", "Approval not found"},
	{store.ErrNamespaceNotFound, 404, "namespace_not_found", "Namespace not found"},
	{store.ErrQueueNotFound, 404, "queue_not_found", "Queue not found"},
	{store.ErrScheduleNotFound, 404, "schedule_not_found", "Schedule not found"},
	{store.ErrTokenNotFound, 404, "token_not_found", "Token not found"},
	{errs.ErrRouteNotFound, 404, "route_not_found", "No such route"},
	{errs.ErrMethodNotAllowed, 405, "method_not_allowed", "Method not allowed"},
	{errs.ErrRequestTimeout, 408, "request_timeout", "Request timeout"},
	{store.ErrRunExists, 409, "run_exists", "Run exists"},
	{store.ErrRunFinished, 409, "run_finished", "Run finished"},
	{store.ErrRunActive, 409, "run_active", "Run still active"},
	{store.ErrRunNotBlocked, 409, "run_not_blocked", "Run not blocked"},
	{store.ErrApprovalDecided, 409, "approval_decided", "Approval already decided"},
	{store.ErrScheduleExists, 409, "schedule_exists", "Schedule exists"},
	{store.ErrSchedulePaused, 409, "schedule_paused", "Schedule already paused"},
	{store.ErrScheduleNotPaused, 409, "schedule_not_paused", "Schedule not paused"},
	{store.ErrTokenExists, 409, "token_exists", "Token exists"},
	{store.ErrTokenInactive, 409, "token_inactive", "Token revoked or expired"},
	{store.ErrNamespaceExists, 409, "namespace_exists", "Namespace exists"},
	{store.ErrQueueExists, 409, "queue_exists", "Queue exists"},
	{store.ErrQueueState, 409, "queue_state", "Queue already in that state"},
	{engine.ErrPayloadTooLarge, 413, "payload_too_large", "Payload too large"},
	{errs.ErrUnsupportedMediaType, 415, "unsupported_media_type", "Unsupported media type"},
	{store.ErrIdempotencyKeyConflict, 422, "idempotency_key_conflict", "Idempotency key conflict"},
	{errs.ErrRateLimited, 429, "rate_limited", "Rate limited"},
	{errs.ErrHeadersTooLarge, 431, "headers_too_large", "Request header fields too large"},
	{errs.ErrUnknownWorkflow, 400, "unknown_workflow", "Unknown workflow"},
	{errs.ErrInvalidInput, 400, "invalid_input", "Invalid workflow input"},
	{store.ErrInvalidParams, 400, "invalid_argument", "Invalid argument"},
	{store.ErrStorageFull, 507, "storage_full", "Insufficient storage"},
	{errs.ErrUnavailable, 503, "unavailable", "Unavailable"},
}

// unavailableToo are errors of the server's side that it answers as
// "unavailable" without being errs.ErrUnavailable: a client reads them back as
// errs.ErrUnavailable (its store closed is, for the client, a server it cannot use).
var unavailableToo = []error{
	store.ErrClosed, store.ErrNoStore,
	context.DeadlineExceeded,
	context.Canceled, // the client went away, or the server stops
}

var byCode = func() map[string]Entry {
	m := make(map[string]Entry, len(table))
	for _, e := range table {
		m[e.Code] = e
	}
	return m
}()

// For returns the entry of err, or false for an error the table does not
// know (an internal error).
func For(err error) (Entry, bool) {
	for _, e := range table {
		if errors.Is(err, e.Err) {
			return e, true
		}
	}
	for _, u := range unavailableToo {
		if errors.Is(err, u) {
			return byCode["unavailable"], true
		}
	}
	return Entry{}, false
}

// Of returns the entry of a code, or false for a code the table does not
// have (a newer server's, or "internal").
func Of(code string) (Entry, bool) {
	e, ok := byCode[code]
	return e, ok
}

// Table returns every entry, in the table's order (for documents and tests).
func Table() []Entry { return append([]Entry(nil), table...) }

// Codes returns every code a problem can have: the table's and Internal.
func Codes() []string {
	out := make([]string, 0, len(table)+1)
	for _, e := range table {
		out = append(out, e.Code)
	}
	return append(out, Internal)
}
