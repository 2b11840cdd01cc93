// Package idemkey is the idempotency key of an HTTP server's request (package
// server), which the client of the request (internal/core.Calls) passes to the
// one store call it guards. The SDK's public API has no such key: a client
// outside the server records none.
package idemkey

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
