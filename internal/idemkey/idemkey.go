// Package idemkey is the idempotency key of an HTTP server's request (package
// server), which the client of the request (internal/core.Calls) passes to the
// one store call it guards. The SDK's public API has no such key: a client
// outside the server records none.
package idemkey

import (
	"bytes"
	"encoding/json"
	"net/http"
)

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
	// Status is the status Render answers: with the converter's name
	// (store.IdempotencyRecord.Renderer), a process that runs the call for
	// another one renders the same response (RenderJSON).
	Status int
}

// RenderJSON renders the response of a route answering status with value v,
// as the server writes it: v as JSON and a newline, no body for 204.
func RenderJSON(status int, v any) (int, []byte, error) {
	if status == http.StatusNoContent {
		return status, nil, nil
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return 0, nil, err
	}
	return status, buf.Bytes(), nil
}

// RendererPrefix prefixes the names of the store renderers package trellis
// registers, one per converter of a guarded call's result
// (store.IdempotencyRecord.Renderer).
const RendererPrefix = "trellis."

// SameRecordRenderer names the renderer of a call whose store result is the
// value its route answers (the server's own store calls on namespaces and
// queues).
const SameRecordRenderer = RendererPrefix + "sameRecord"
