package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/errs"
	"github.com/trellis-dev/trellis/internal/problem"
	"github.com/trellis-dev/trellis/store"
)

// Errors of the server. Each is the same value as the SDK's sentinel of its
// concept (errors.Is(err, trellis.ErrPermissionDenied) holds for a server's
// ErrPermissionDenied); internal/problem maps each to one status and one code.
var (
	// ErrPermissionDenied: the principal lacks the role the route needs.
	ErrPermissionDenied = errs.ErrPermissionDenied
	// ErrInvalidArgument: a request is malformed (body, query or path); it is
	// trellis.ErrInvalidParams.
	ErrInvalidArgument = store.ErrInvalidParams
	// ErrBodyTooLarge: a request body exceeds Config.MaxBodyBytes; it is
	// trellis.ErrPayloadTooLarge.
	ErrBodyTooLarge = trellis.ErrPayloadTooLarge
	// ErrUnsupportedMediaType: a body that is not application/json.
	ErrUnsupportedMediaType = errs.ErrUnsupportedMediaType
	// ErrNotFound: no route has this path (problem code route_not_found).
	ErrNotFound = errs.ErrRouteNotFound
	// ErrMethodNotAllowed: the path exists with other methods.
	ErrMethodNotAllowed = errs.ErrMethodNotAllowed
	// ErrIdempotencyKeyConflict: an Idempotency-Key reused with another request.
	ErrIdempotencyKeyConflict = store.ErrIdempotencyKeyConflict
	// ErrRateLimited: too many requests; retry later.
	ErrRateLimited = errs.ErrRateLimited
	// ErrRequestTimeout: the request was not received within Config.ReadTimeout
	// (a client sending its body too slowly).
	ErrRequestTimeout = errs.ErrRequestTimeout
	// ErrHeadersTooLarge: the request line and header fields exceed 64 KiB.
	ErrHeadersTooLarge = errs.ErrHeadersTooLarge
	// ErrUnavailable: the store does not answer, or the server is stopping.
	ErrUnavailable = errs.ErrUnavailable
)

// ProblemTypeBase prefixes a problem's code to form its type URI: the code's
// section of docs/http-api.md.
const ProblemTypeBase = problem.TypeBase

// Problem is an RFC 9457 problem document with a stable code.
type Problem struct {
	// Type is the URI of the code's section of docs/http-api.md.
	Type string `json:"type"`
	// Title is a short summary of the code, the same for every problem of it.
	Title string `json:"title"`
	// Status is the HTTP status.
	Status int `json:"status"`
	// Detail says what went wrong with this request, for people.
	Detail string `json:"detail"`
	// Code is the stable, machine-readable code (docs/http-api.md, "Errors").
	Code string `json:"code"`
	// RequestID is the request's X-Request-Id (RequestIDHeader), which its
	// access log line and its audit entry hold too.
	RequestID string `json:"request_id,omitempty"`
}

// problemFor maps err to its problem; unknown errors are internal and their text
// is not shown (it may name hosts or paths).
func problemFor(err error) (p Problem, known bool) {
	e, ok := problem.For(err)
	if !ok {
		return Problem{Type: problem.TypeBase + problem.Internal, Title: "Internal error", Status: 500,
			Detail: "internal error (logged by the server)", Code: problem.Internal}, false
	}
	return Problem{Type: e.Type(), Title: e.Title, Status: e.Status, Detail: detailFor(err, e), Code: e.Code}, true
}

// detailFor is the detail of err, a problem of entry e, for people: what err
// says from its sentinel on, without the wrap chain of the calls it went
// through ("starting order: store: ...: run not found: ..." says "run not
// found: ..."). An error of another layer that the server answers as
// unavailable (a context ended, its store closed) gets a sentence of its own.
func detailFor(err error, e problem.Entry) string {
	msg := err.Error()
	if !errors.Is(err, e.Err) { // one of problem's unavailableToo
		return "the server cannot answer now (it is stopping, or its store does not answer); retry later"
	}
	if i := strings.Index(msg, e.Err.Error()); i > 0 {
		msg = msg[i:]
	}
	return msg
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
	var na *notAllowed
	if errors.As(err, &na) {
		w.Header().Set("Allow", strings.Join(na.allow, ", "))
	}
	p.RequestID = w.Header().Get(RequestIDHeader)
	setRetryAfter(w.Header(), err)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// notAllowed is ErrMethodNotAllowed for a path that takes the methods allow:
// the 405 answer's Allow header (RFC 9110, 15.5.6).
type notAllowed struct {
	method string
	allow  []string
}

func (e *notAllowed) Error() string {
	return ErrMethodNotAllowed.Error() + ": this path takes " + strings.Join(e.allow, ", ") + ", not " + e.method
}

func (e *notAllowed) Unwrap() error { return ErrMethodNotAllowed }

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
