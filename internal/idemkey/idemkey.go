// Package idemkey carries an idempotency key from the HTTP server (package server)
// to the one store call of an SDK method that it guards, through the call's
// context. It is internal plumbing: the SDK's public API does not change, and a
// context without a key (every call outside the server) records nothing.
package idemkey

import "context"

// Request is the idempotency key of one API request.
type Request struct {
	Key string
	// Fingerprint identifies the request (store.IdempotencyFingerprint).
	Fingerprint []byte
	// Render renders the response to keep under the key from the SDK value of
	// the guarded call's result: *trellis.Run (start, reset, cancel, resume),
	// *trellis.ApprovalRecord (approve, reject), *trellis.Schedule,
	// *trellis.Queue (update, pause, resume a queue) or nil (event, deletion).
	// The store calls it inside its transaction, possibly more than once when it
	// retries it.
	Render func(v any) (status int, body []byte, err error)
}

type ctxKey struct{}

// With returns ctx carrying r.
func With(ctx context.Context, r *Request) context.Context {
	return context.WithValue(ctx, ctxKey{}, r)
}

// From returns the request ctx carries, or nil.
func From(ctx context.Context) *Request {
	r, _ := ctx.Value(ctxKey{}).(*Request)
	return r
}
