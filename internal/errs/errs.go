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
	// ErrPermissionDenied: the principal lacks the role the call needs.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnavailable: the server cannot be reached, or its store does not
	// answer, or it is stopping.
	ErrUnavailable = errors.New("unavailable")
	// ErrRateLimited: the server refused the call for now; retry later.
	ErrRateLimited = errors.New("rate limited")
	// ErrUnknownWorkflow: no workflow with that name is registered.
	ErrUnknownWorkflow = errors.New("unknown workflow")
	// ErrInvalidInput: the input cannot be decoded into the workflow's input type.
	ErrInvalidInput = errors.New("invalid workflow input")
)

// Errors of the HTTP layer (the server answers them; a remote client gets
// them back by their problem codes).
var (
	// ErrRouteNotFound: no route has the request's path.
	ErrRouteNotFound = errors.New("no such route")
	// ErrMethodNotAllowed: the path exists with other methods.
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrUnsupportedMediaType: a request body that is not application/json.
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	// ErrHeadersTooLarge: the request line and header fields exceed the server's limit.
	ErrHeadersTooLarge = errors.New("request header fields too large")
	// ErrRequestTimeout: the request was not received in time (a client sending
	// its body too slowly). It is an ErrUnavailable too: for the client it is a
	// transport failure, as a broken connection is.
	ErrRequestTimeout = &kindOf{msg: "request timeout", of: ErrUnavailable}
)

// kindOf is a sentinel that is a narrower case of another: errors.Is matches
// both.
type kindOf struct {
	msg string
	of  error
}

func (e *kindOf) Error() string { return e.msg }
func (e *kindOf) Unwrap() error { return e.of }
