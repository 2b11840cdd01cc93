package trellis

import (
	"github.com/trellis-dev/trellis/internal/idemkey"
	"github.com/trellis-dev/trellis/store"
)

// converters are the converters of guarded calls' results by name: a call
// names its converter in the store's idempotency record (Renderer), so that
// a store that runs the call in another process (store/storejs) renders the
// same response there: the converter's registered renderer is the server's
// JSON of its value (idemkey.RenderJSON).
var converters = map[string]func(result any) any{
	"createdRun": createdRun, "changedRun": changedRun, "decided": decided, "noResult": noResult,
	"sameRecord": sameRecord, "startedMany": startedMany, "scheduleResult": scheduleResult,
	"firedRun": firedRun, "backfilledRuns": backfilledRuns,
}

// rendererPrefix prefixes the converters' names as store renderers.
const rendererPrefix = idemkey.RendererPrefix

func init() {
	for name, conv := range converters {
		store.RegisterIdempotencyRenderer(rendererPrefix+name, func(status int, result any) (int, []byte, error) {
			return idemkey.RenderJSON(status, conv(result))
		})
	}
}

// Converters of guarded calls' results (see embedded.idempotency).
func createdRun(result any) any { return runFromStore(result.(*store.RunCreateResult).Run) }
func changedRun(result any) any { return runFromStore(result.(*store.Run)) }
func decided(result any) any    { return approvalFromStore(result.(*store.Approval)) }
func noResult(any) any          { return nil }

// sameRecord is the converter of a call whose store result is its SDK value
// (*Queue and *Namespace are the store's records).
func sameRecord(result any) any { return result }
