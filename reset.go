package trellis

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/store"
)

// Reset recovers a finished run (failed, cancelled, or succeeded) by starting a new
// run of the same workflow, with the same workflow ID, input, queue, priority and
// version, that keeps the history the old run recorded before the first op of the
// step named step and executes again from that step on. Ops recorded before it
// (steps, timers, events received, child outcomes, approval decisions, run-store
// writes) are replayed, not repeated; the old run is left as it was. An empty step
// starts over from the beginning with the same input. It returns the new run.
//
// The new run has no deadline and no parent; its Attempts starts at 1 (the run it
// came from). It keeps the workflow retry policy the run was started with
// (StartOptions.Retry), from its first attempt. Errors: ErrRunNotFound; ErrRunActive for a run that has not finished
// (cancel it first); ErrInvalidParams when the run has no such step, when an op
// before it had not finished (an event wait or a child started before the step
// and awaited after it), or when a Map recorded by an older version (whose
// results stay with the old run's children) comes before it; ErrRunExists when
// another run with the workflow ID is active.
func (c *Client) Reset(ctx context.Context, ref, step string) (*Run, error) {
	return callV(ctx, c, ClientCall{Method: "Reset", Ref: ref}, func(ctx context.Context) (*Run, error) { return c.b.reset(ctx, ref, step) })
}

// resetPrefix returns the ops recorded before the first op of step (all of them
// finished) and the run store they leave. An empty step keeps nothing.
func resetPrefix(history []*store.Op, step string) ([]*store.Op, []store.KVWrite, error) {
	if step == "" {
		return nil, nil, nil
	}
	at := -1
	for _, op := range history {
		if op.Kind == store.OpStep && op.Name == step {
			at = op.Position
			break
		}
	}
	if at < 0 {
		return nil, nil, fmt.Errorf("%w: the run has no step %q", ErrInvalidParams, step)
	}
	var kept []*store.Op
	var kv []store.KVWrite
	for _, op := range history {
		if op.Position >= at {
			continue
		}
		if !op.Done {
			return nil, nil, fmt.Errorf("%w: op %d (%s) before step %q had not finished",
				ErrInvalidParams, op.Position, engine.Describe(op.Kind, op.Name), step)
		}
		kept = append(kept, op)
		switch op.Kind {
		case store.OpSet:
			kv = append(kv, store.KVWrite{Key: op.Name, Value: op.Result})
		case store.OpDelete:
			kv = append(kv, store.KVWrite{Key: op.Name, Delete: true})
		}
	}
	if len(kept) == 0 {
		kv = nil
	}
	return kept, kv, nil
}
