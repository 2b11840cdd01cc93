package trellis

import (
	"github.com/trellis-dev/trellis/store"
)

// Converters of guarded calls' results (see embedded.idempotency).
func createdRun(result any) any { return runFromStore(result.(*store.RunCreateResult).Run) }
func changedRun(result any) any { return runFromStore(result.(*store.Run)) }
func decided(result any) any    { return approvalFromStore(result.(*store.Approval)) }
func noResult(any) any          { return nil }

// sameRecord is the converter of a call whose store result is its SDK value
// (*Queue and *Namespace are the store's records).
func sameRecord(result any) any { return result }
