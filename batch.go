package trellis

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/internal/problem"
	"github.com/trellis-dev/trellis/store"
)

// MaxStartMany is the most runs one StartMany call starts.
const MaxStartMany = store.MaxBatchRuns

// StartRequest is one run of a StartMany batch: a workflow or job by name with
// its encoded input, as StartRaw takes them.
type StartRequest struct {
	Workflow string
	Input    []byte
	Options  StartOptions
}

// StartResult is the outcome of one run of a StartMany batch.
type StartResult struct {
	// Run is the run created, or the existing run that ReuseReturnExisting
	// returned; nil when the item was not started.
	Run *Run `json:"run,omitempty"`
	// Created is true when this item created Run.
	Created bool `json:"created"`
	// Error says why the item was not started: its reuse policy rejected it
	// (code "run_exists", errors.Is ErrRunExists).
	Error *StartError `json:"error,omitempty"`
}

// StartError is the error of one item of a batch.
type StartError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *StartError) Error() string { return e.Message }

// Unwrap maps the code to its sentinel (internal/problem's table, as a
// server's problems): ErrRunExists for "run_exists".
func (e *StartError) Unwrap() error {
	if entry, ok := problem.Of(e.Code); ok {
		return entry.Err
	}
	return nil
}

// StartMany starts up to MaxStartMany runs in one transaction, with one
// multi-row insert: every run it creates is durable before it returns, or
// none is (an error). Each item gets its own outcome, in order: created, the
// existing run its ReuseReturnExisting policy returned, or not started because
// its reuse policy rejected it (StartResult.Error), which fails no other item.
// Inputs are checked as StartRaw checks them; any invalid item fails the whole
// call and starts nothing. Runs are claimed by workers like any other (no
// direct dispatch to this process's worker).
func (c *Client) StartMany(ctx context.Context, reqs []StartRequest) ([]StartResult, error) {
	if len(reqs) == 0 || len(reqs) > MaxStartMany {
		return nil, fmt.Errorf("starting runs: %w: %d runs (1 to %d)", ErrInvalidParams, len(reqs), MaxStartMany)
	}
	for i := range reqs {
		if err := reqs[i].Options.check(); err != nil {
			return nil, fmt.Errorf("starting runs: item %d: %w", i, err)
		}
	}
	results, err := callV(ctx, c, ClientCall{Method: "StartMany"}, func(ctx context.Context) ([]StartResult, error) {
		return c.b.startMany(ctx, reqs)
	})
	if err != nil {
		return nil, err
	}
	if m := c.cfg.Metrics; m != nil {
		for i, r := range results {
			if r.Created {
				m.workflow(reqs[i].Workflow).started.Inc()
			}
		}
	}
	return results, nil
}

// startResults converts a batch's store result.
func startResults(res *store.RunsCreateResult) []StartResult {
	out := make([]StartResult, len(res.Items))
	for i, it := range res.Items {
		switch {
		case it.Err != nil:
			code := problem.Internal
			if entry, ok := problem.For(it.Err); ok {
				code = entry.Code
			}
			out[i].Error = &StartError{Code: code, Message: it.Err.Error()}
		default:
			out[i] = StartResult{Run: runFromStore(it.Run), Created: it.Created}
		}
	}
	return out
}

// StartManyResponse is the body of the answer to POST
// /v1/namespaces/{ns}/runs:batch: one result per run, in order.
type StartManyResponse struct {
	Results []StartResult `json:"results"`
}

func startedMany(result any) any {
	return StartManyResponse{Results: startResults(result.(*store.RunsCreateResult))}
}

// startManyBody is the body of POST runs:batch (server.StartManyRequest).
type startManyBody struct {
	Runs []startBody `json:"runs"`
}

// Delete deletes a finished run now, with everything that belongs to it: its
// history, attempts, stored values, events, approvals and the idempotency keys
// that name it. A run that has not finished is not deleted (ErrRunActive:
// cancel it first). Finished runs are also deleted in the background once
// their namespace's retention period has passed (see docs/retention.md).
func (c *Client) Delete(ctx context.Context, ref string) error {
	return c.call(ctx, ClientCall{Method: "Delete", Ref: ref}, func(ctx context.Context) error { return c.b.delete(ctx, ref) })
}
