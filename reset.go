package trellis

import (
	"context"
	"fmt"

	"github.com/google/uuid"
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
	return callV(ctx, c, ClientCall{Method: "Reset", Ref: ref}, func(ctx context.Context) (*Run, error) { return c.doReset(ctx, ref, step) })
}

// doReset is Reset without the call interceptors.
func (c *Client) doReset(ctx context.Context, ref, step string) (*Run, error) {
	if c.remote != nil {
		return c.remote.reset(ctx, ref, step)
	}
	src, err := c.doGet(ctx, ref)
	if err != nil {
		return nil, err
	}
	if !src.Status.Terminal() {
		return nil, fmt.Errorf("resetting run %s: %w (status %s)", src.ID, ErrRunActive, src.Status)
	}
	history, err := c.store.HistoryList(ctx, &store.HistoryListParams{Namespace: c.cfg.Namespace, Ref: src.ID})
	if err != nil {
		return nil, fmt.Errorf("resetting run %s: %w", src.ID, err)
	}
	kept, kv, err := resetPrefix(history, step)
	if err == nil {
		err = c.checkNoMap(ctx, src, kept)
	}
	if err != nil {
		return nil, fmt.Errorf("resetting run %s: %w", src.ID, err)
	}
	res, err := c.store.RunCreate(ctx, &store.RunCreateParams{
		Namespace: c.cfg.Namespace, ID: uuid.Must(uuid.NewV7()).String(), WorkflowID: src.WorkflowID,
		Workflow: src.Workflow, Queue: src.Queue, Priority: src.Priority, Version: src.Version, Pinned: src.Pinned,
		Input: src.Input, History: kept, KV: kv, Idempotency: idempotency(ctx, createdRun),
		Retry: src.Retry, // its start's workflow retry policy; the new run is at its first attempt
	})
	if err != nil {
		return nil, fmt.Errorf("resetting run %s: %w", src.ID, err)
	}
	return runFromStore(res.Run), nil
}

// checkNoMap refuses to keep a Map's op that does not hold its items' results
// (recorded before Map ops did): those are read from its child runs, which
// belong to the old run. (A single child's result is in its op.)
func (c *Client) checkNoMap(ctx context.Context, src *Run, kept []*store.Op) error {
	for _, op := range kept {
		if op.Kind != store.OpChild {
			continue
		}
		runs, err := c.store.RunChildren(ctx, &store.RunChildrenParams{Namespace: src.Namespace, Parent: src.ID, Position: op.Position})
		if err != nil {
			return err
		}
		if len(runs) > 0 && runs[0].ID == engine.ChildRunID(src.ID, op.Position, 0) && !engine.MapSelfContained(op) {
			return fmt.Errorf("%w: op %d is a Map recorded by an older version, whose results stay with the old run: reset to a step before it",
				ErrInvalidParams, op.Position)
		}
	}
	return nil
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
