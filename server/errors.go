package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// Errors of the server itself; the SDK's sentinels are mapped by problemTable.
var (
	// ErrPermissionDenied: the principal lacks the role the route needs.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrInvalidArgument: a request is malformed (body, query or path).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrBodyTooLarge: a request body exceeds Config.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrUnsupportedMediaType: a body that is not application/json.
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	// ErrNotFound: no route has this path.
	ErrNotFound = errors.New("not found")
	// ErrMethodNotAllowed: the path exists with other methods.
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrIdempotencyKeyConflict: an Idempotency-Key reused with another request.
	ErrIdempotencyKeyConflict = errors.New("idempotency key reused with a different request")
	// ErrRateLimited: too many requests; retry later.
	ErrRateLimited = errors.New("rate limited")
	// ErrRequestTimeout: the request was not received within Config.ReadTimeout
	// (a client sending its body too slowly).
	ErrRequestTimeout = errors.New("request timeout")
	// ErrHeadersTooLarge: the request line and header fields exceed 64 KiB.
	ErrHeadersTooLarge = errors.New("request header fields too large")
	// ErrUnavailable: the store does not answer, or the server is stopping.
	ErrUnavailable = errors.New("unavailable")
)

// problemTable is the one mapping of errors to HTTP statuses and stable codes
// (docs/http-api.md). The first entry that errors.Is matches wins.
var problemTable = []struct {
	err    error
	status int
	code   string
	title  string
}{
	{auth.ErrUnauthenticated, 401, "unauthenticated", "Unauthenticated"},
	{ErrPermissionDenied, 403, "permission_denied", "Permission denied"},
	{trellis.ErrRunNotFound, 404, "not_found", "Run not found"},
	{trellis.ErrKeyNotFound, 404, "not_found", "Key not found"},
	{trellis.ErrApprovalNotFound, 404, "not_found", "Approval not found"},
	{store.ErrNamespaceNotFound, 404, "not_found", "Namespace not found"},
	{store.ErrQueueNotFound, 404, "not_found", "Queue not found"},
	{trellis.ErrScheduleNotFound, 404, "not_found", "Schedule not found"},
	{ErrNotFound, 404, "not_found", "Not found"},
	{ErrMethodNotAllowed, 405, "method_not_allowed", "Method not allowed"},
	{trellis.ErrRunExists, 409, "run_exists", "Run exists"},
	{trellis.ErrRunFinished, 409, "run_finished", "Run finished"},
	{trellis.ErrRunActive, 409, "run_active", "Run still active"},
	{trellis.ErrRunNotBlocked, 409, "run_not_blocked", "Run not blocked"},
	{trellis.ErrApprovalDecided, 409, "approval_decided", "Approval already decided"},
	{trellis.ErrScheduleExists, 409, "schedule_exists", "Schedule exists"},
	{trellis.ErrSchedulePaused, 409, "schedule_paused", "Schedule already paused"},
	{trellis.ErrScheduleNotPaused, 409, "schedule_not_paused", "Schedule not paused"},
	{ErrBodyTooLarge, 413, "payload_too_large", "Payload too large"},
	{trellis.ErrPayloadTooLarge, 413, "payload_too_large", "Payload too large"},
	{ErrRequestTimeout, 408, "request_timeout", "Request timeout"},
	{ErrHeadersTooLarge, 431, "headers_too_large", "Request header fields too large"},
	{ErrUnsupportedMediaType, 415, "unsupported_media_type", "Unsupported media type"},
	{ErrIdempotencyKeyConflict, 422, "idempotency_key_conflict", "Idempotency key conflict"},
	{store.ErrIdempotencyKeyConflict, 422, "idempotency_key_conflict", "Idempotency key conflict"},
	{ErrRateLimited, 429, "rate_limited", "Rate limited"},
	{trellis.ErrUnknownWorkflow, 400, "invalid_argument", "Unknown workflow"},
	{store.ErrTokenExists, 409, "token_exists", "Token exists"},
	{store.ErrTokenInactive, 409, "token_inactive", "Token revoked or expired"},
	{store.ErrNamespaceExists, 409, "namespace_exists", "Namespace exists"},
	{store.ErrQueueExists, 409, "queue_exists", "Queue exists"},
	{store.ErrQueueState, 409, "queue_state", "Queue already in that state"},
	{store.ErrTokenNotFound, 404, "not_found", "Token not found"},
	{ErrInvalidArgument, 400, "invalid_argument", "Invalid argument"},
	{trellis.ErrInvalidParams, 400, "invalid_argument", "Invalid argument"},
	{trellis.ErrInvalidInput, 400, "invalid_argument", "Invalid argument"},
	{trellis.ErrStorageFull, 507, "storage_full", "Insufficient storage"},
	{ErrUnavailable, 503, "unavailable", "Unavailable"},
	{trellis.ErrClosed, 503, "unavailable", "Unavailable"},
	{store.ErrNoStore, 503, "unavailable", "Unavailable"},
	{context.DeadlineExceeded, 503, "unavailable", "Unavailable"},
	{context.Canceled, 503, "unavailable", "Unavailable"}, // the client went away, or the server stops
}

// ProblemTypeBase prefixes a problem's code to form its type URI.
const ProblemTypeBase = "https://github.com/trellis-dev/trellis/blob/main/docs/http-api.md#"

// Problem is an RFC 9457 problem document with a stable code.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	// RequestID is the request's X-Request-Id (RequestIDHeader), which its
	// access log line and its audit entry hold too.
	RequestID string `json:"request_id,omitempty"`
}

// problemFor maps err to its problem; unknown errors are internal and their text
// is not shown (it may name hosts or paths).
func problemFor(err error) (p Problem, known bool) {
	for _, e := range problemTable {
		if errors.Is(err, e.err) {
			return Problem{Type: ProblemTypeBase + e.code, Title: e.title, Status: e.status,
				Detail: err.Error(), Code: e.code}, true
		}
	}
	return Problem{Type: ProblemTypeBase + "internal", Title: "Internal error", Status: 500,
		Detail: "internal error (logged by the server)", Code: "internal"}, false
}

// writeError answers err as application/problem+json.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p, known := problemFor(err)
	if !known {
		s.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if p.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="trellis"`)
	}
	p.RequestID = w.Header().Get(RequestIDHeader)
	setRetryAfter(w.Header(), err)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
