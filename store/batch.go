package store

import (
	"context"
	"fmt"
	"time"
)

// MaxBatchRuns caps the runs one RunsCreate call creates.
const MaxBatchRuns = 1000

// BatchCreator creates many runs at once: the store side of Client.StartMany
// and of POST /v1/namespaces/{ns}/runs:batch. Both SQL drivers implement it.
type BatchCreator interface {
	// RunsCreate creates every run of p in one transaction with one multi-row
	// insert: all the created runs are durable or none is. Each run keeps its
	// own outcome under its reuse policy (RunsCreateItem): created, the
	// existing run returned (ReuseReturnExisting), or rejected with
	// ErrRunExists, which fails that item only. A created run whose item has
	// a Claim is created claimed, as RunCreate does it (and under the same
	// conditions): its item's Claimed holds the lease. Invalid parameters fail
	// the whole call with ErrInvalidParams and write nothing.
	RunsCreate(ctx context.Context, p *RunsCreateParams) (*RunsCreateResult, error)
}

// RunsCreateParams are the parameters of RunsCreate.
type RunsCreateParams struct {
	Namespace string `json:"namespace"`
	// Runs are the runs to create, 1 to MaxBatchRuns, each as RunCreate takes
	// it but without History, KV or Idempotency; its Namespace is
	// Namespace's (empty means Namespace). Run IDs must differ.
	Runs []*RunCreateParams `json:"runs"`
	// Idempotency, when set, records an idempotency key with the batch,
	// atomically (see IdempotencyStore); its response renders the
	// *RunsCreateResult.
	Idempotency *IdempotencyRecord `json:"-"`
}

// RunsCreateItem is the outcome of one run of a batch, at its index.
type RunsCreateItem struct {
	// Run is the created run, or the existing one ReuseReturnExisting
	// returned; nil when the item was rejected.
	Run *Run `json:"run,omitempty"`
	// Created is true when the item created Run.
	Created bool `json:"created"`
	// Err is ErrRunExists (wrapped) for an item its reuse policy rejected.
	Err error `json:"-"`
	// Claimed is the lease on the created run when the item's Claim was
	// honoured (Run is then Claimed.Run); nil otherwise.
	Claimed *ClaimedRun `json:"claimed,omitempty"`
}

// RunsCreateResult is the result of RunsCreate, one item per run in order.
type RunsCreateResult struct {
	Items []RunsCreateItem `json:"items"`
}

// Validate checks p, filling each run's empty Namespace.
func (p *RunsCreateParams) Validate() error {
	switch {
	case p.Namespace == "":
		return fmt.Errorf("%w: Namespace is required", ErrInvalidParams)
	case len(p.Runs) == 0:
		return fmt.Errorf("%w: no runs to create", ErrInvalidParams)
	case len(p.Runs) > MaxBatchRuns:
		return fmt.Errorf("%w: %d runs in one batch (at most %d)", ErrInvalidParams, len(p.Runs), MaxBatchRuns)
	}
	if err := p.Idempotency.Validate(); err != nil {
		return err
	}
	ids := make(map[string]bool, len(p.Runs))
	for i, r := range p.Runs {
		if r == nil {
			return fmt.Errorf("%w: run %d is missing", ErrInvalidParams, i)
		}
		if r.Namespace == "" {
			r.Namespace = p.Namespace
		}
		switch {
		case r.Namespace != p.Namespace:
			return fmt.Errorf("%w: run %d is of namespace %q, not %q", ErrInvalidParams, i, r.Namespace, p.Namespace)
		case len(r.History) > 0 || len(r.KV) > 0 || r.Idempotency != nil:
			return fmt.Errorf("%w: run %d: History, KV and Idempotency are not taken in a batch", ErrInvalidParams, i)
		case ids[r.ID]:
			return fmt.Errorf("%w: run %d: run ID %q is repeated in the batch", ErrInvalidParams, i, r.ID)
		}
		ids[r.ID] = true
		if err := r.Validate(); err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
	}
	return nil
}

// RunDeleter deletes finished runs and everything that belongs to them: ops,
// attempts, run-store values, inbox events, child groups, approvals and the
// idempotency keys whose response names the run (see docs/retention.md). Both
// SQL drivers implement it.
type RunDeleter interface {
	// RunDelete deletes one finished run now. ErrRunNotFound when no run
	// matches Ref; ErrRunActive when the run has not finished (cancel it
	// first), and then nothing is deleted.
	RunDelete(ctx context.Context, p *RunDeleteParams) (*Run, error)
	// RunsPurge deletes up to Limit runs of Namespace that finished before
	// FinishedBefore, each finished status oldest first (in order of
	// creation), with everything that belongs to them, in one short
	// transaction. It returns how many runs it deleted: fewer than
	// Limit means none is left, unless another process's purge deleted
	// some of those it found meanwhile.
	RunsPurge(ctx context.Context, p *RunsPurgeParams) (int, error)
	// RunNamespaces lists the namespaces that have runs, in order.
	RunNamespaces(ctx context.Context) ([]string, error)
}

// RunDeleteParams are the parameters of RunDelete.
type RunDeleteParams struct {
	Namespace string `json:"namespace"`
	// Ref is a run ID or a workflow ID (its latest run).
	Ref string `json:"ref"`
	// Idempotency, when set, records an idempotency key with the deletion,
	// atomically (see IdempotencyStore); its response renders nil. Unlike the
	// keys whose response names a run, this one outlives the run it deleted,
	// so that a retry is told the key is used rather than ErrRunNotFound.
	Idempotency *IdempotencyRecord `json:"-"`
}

// Validate reports the first missing or malformed field of p, wrapping
// ErrInvalidParams.
func (p *RunDeleteParams) Validate() error {
	if p.Namespace == "" || p.Ref == "" {
		return fmt.Errorf("%w: Namespace and Ref are required", ErrInvalidParams)
	}
	return p.Idempotency.Validate()
}

// RunsPurgeParams are the parameters of RunsPurge.
type RunsPurgeParams struct {
	Namespace      string    `json:"namespace"`
	FinishedBefore time.Time `json:"finished_before"`
	// Limit caps the runs deleted; 0 means DefaultPurgeBatch, at most
	// MaxPurgeBatch.
	Limit int `json:"limit,omitempty"`
}

// Purge batch sizes: small enough that a purge transaction is over in a few
// milliseconds and never holds a checkpoint up for long.
const (
	DefaultPurgeBatch = 200
	MaxPurgeBatch     = 10000
)

// Validate checks p and applies the default Limit.
func (p *RunsPurgeParams) Validate() error {
	switch {
	case p.Namespace == "":
		return fmt.Errorf("%w: Namespace is required", ErrInvalidParams)
	case p.FinishedBefore.IsZero():
		return fmt.Errorf("%w: FinishedBefore is required", ErrInvalidParams)
	case p.Limit < 0 || p.Limit > MaxPurgeBatch:
		return fmt.Errorf("%w: Limit must be 0 to %d", ErrInvalidParams, MaxPurgeBatch)
	}
	if p.Limit == 0 {
		p.Limit = DefaultPurgeBatch
	}
	return nil
}
