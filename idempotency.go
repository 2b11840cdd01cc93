package trellis

import (
	"context"

	"github.com/trellis-dev/trellis/internal/idemkey"
	"github.com/trellis-dev/trellis/store"
)

// idempotency returns the store record of the idempotency key the HTTP server put
// in ctx (internal/idemkey), or nil when there is none: the guarded call writes it
// in the transaction of its change. sdk turns the store's result into the SDK
// value the server renders its response from.
func idempotency(ctx context.Context, sdk func(result any) any) *store.IdempotencyRecord {
	r := idemkey.From(ctx)
	if r == nil {
		return nil
	}
	return &store.IdempotencyRecord{Key: r.Key, Fingerprint: r.Fingerprint,
		Response: func(result any) (int, []byte, error) { return r.Render(sdk(result)) }}
}

// Converters of guarded calls' results (see idempotency).
func createdRun(result any) any { return runFromStore(result.(*store.RunCreateResult).Run) }
func changedRun(result any) any { return runFromStore(result.(*store.Run)) }
func decided(result any) any    { return approvalFromStore(result.(*store.Approval)) }
func noResult(any) any          { return nil }

// sameRecord is the converter of a call whose store result is its SDK value
// (*Queue and *Namespace are the store's records).
func sameRecord(result any) any { return result }
