// Package errs holds the sentinel errors that more than one layer returns and
// that belong to no store or engine concept: the root package, the server, the
// worker protocol and the remote clients re-export these values, so each
// concept has one identity and errors.Is holds across every layer
// (trellis.ErrPermissionDenied is server.ErrPermissionDenied is
// workerwire.ErrPermissionDenied). Store-level sentinels live in package store,
// the engine's in internal/engine.
package errs

import "errors"

// Errors of a call refused or failed for a reason that is not the run's.
var (
	// PermissionDenied: the principal lacks the role the call needs.
	PermissionDenied = errors.New("permission denied")
	// Unavailable: the server cannot be reached, or its store does not
	// answer, or it is stopping.
	Unavailable = errors.New("unavailable")
	// RateLimited: the server refused the call for now; retry later.
	RateLimited = errors.New("rate limited")
	// UnknownWorkflow: no workflow with that name is registered.
	UnknownWorkflow = errors.New("unknown workflow")
	// InvalidInput: the input cannot be decoded into the workflow's input type.
	InvalidInput = errors.New("invalid workflow input")
)

// Errors of the HTTP layer (the server answers them; a remote client gets
// them back by their problem codes).
var (
	// RouteNotFound: no route has the request's path.
	RouteNotFound = errors.New("no such route")
	// MethodNotAllowed: the path exists with other methods.
	MethodNotAllowed = errors.New("method not allowed")
	// UnsupportedMediaType: a request body that is not application/json.
	UnsupportedMediaType = errors.New("unsupported media type")
	// HeadersTooLarge: the request line and header fields exceed the server's limit.
	HeadersTooLarge = errors.New("request header fields too large")
	// RequestTimeout: the request was not received in time (a client sending
	// its body too slowly). It is an Unavailable too: for the client it is a
	// transport failure, as a broken connection is.
	RequestTimeout = &kindOf{msg: "request timeout", of: Unavailable}
)

// kindOf is a sentinel that is a narrower case of another: errors.Is matches
// both.
type kindOf struct {
	msg string
	of  error
}

func (e *kindOf) Error() string { return e.msg }
func (e *kindOf) Unwrap() error { return e.of }
