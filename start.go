package trellis

import (
	"context"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// StartOptions configure a new run.
type StartOptions struct {
	// ID is the workflow ID: the caller's key for the run (e.g. "order-42"). At most
	// one run per ID is active at a time. Default: the generated run ID.
	ID string
	// Queue overrides the workflow's queue.
	Queue string
	// Priority: higher runs are claimed first among due runs. Default 0.
	Priority int
	// Deadline: once passed, no new step starts and the run fails with
	// ErrDeadlineExceeded. Zero means none.
	Deadline time.Time
	// StartAt delays the run: no worker claims it before this time. Zero means at
	// once. A delayed run is never dispatched directly to the starting process's
	// worker; it waits in the store, pending, until it is due.
	StartAt time.Time
	// Retry, when set, is the run's workflow retry policy, stored with it: it
	// replaces the workflow's WorkflowOptions.Retry for this run (MaxAttempts 1:
	// no retries). nil: the workflow's. See docs/workflow-retries.md.
	Retry *RetryPolicy
	// Reuse decides what happens when a run with ID exists; default ReuseRejectActive.
	Reuse ReusePolicy
	// ConcurrencyKey (e.g. a customer ID) counts the run against its queue's key
	// limit (QueueSettings.KeyLimit): at most that many runs with one key run at
	// once; the others wait, in order. Empty: no key. See docs/queues.md.
	ConcurrencyKey string
	// Version, when not 0, pins the run to this version of the workflow (1 to
	// store.MaxVersion): the run's Version is this one instead of the
	// registered workflow's, and only a worker that serves it (its
	// WorkflowOptions.Version or AlsoServes) claims the run; while no live
	// worker does, the run stays pending with a wait reason that says so. 0
	// (the default): the run takes the registered workflow's version (0 when
	// this client has not registered it) and any worker of the workflow runs
	// it, whatever its version. See docs/versioning.md.
	Version int
}

// checkVersion refuses a StartOptions.Version out of range.
func checkVersion(o StartOptions) error {
	if o.Version < 0 || o.Version > store.MaxVersion {
		return fmt.Errorf("%w: version %d is not 1 to %d (or 0: not pinned)", ErrInvalidParams, o.Version, store.MaxVersion)
	}
	return nil
}

// Handle refers to a run started by Start or found by GetHandle.
type Handle[Out any] struct {
	c     *Client
	id    string
	runID string
}

// ID returns the run's workflow ID.
func (h *Handle[Out]) ID() string { return h.id }

// RunID returns the run's unique ID.
func (h *Handle[Out]) RunID() string { return h.runID }

// Result waits for the run to finish and returns its output, or a *RunError for a
// failed or cancelled run. Waiting costs no query of its own: the outcome comes
// from this process's engine, or from the client's one results watcher, which
// reads many runs' outcomes at once when the store reports them ended (see
// docs/architecture.md, "Waiting for results"). The call interceptors see it
// as method "Result", with the run ID as Ref.
func (h *Handle[Out]) Result(ctx context.Context) (Out, error) {
	var out Out
	run, err := callV(ctx, h.c, ClientCall{Method: "Result", Ref: h.runID}, func(ctx context.Context) (*Run, error) {
		return h.c.b.waitRun(ctx, h.runID)
	})
	if err != nil {
		return out, err
	}
	if run.Status != StatusSucceeded {
		return out, runError(run)
	}
	if err := h.c.cfg.Codec.Unmarshal(run.Output, &out); err != nil {
		return out, fmt.Errorf("decoding result of run %s: %w", run.ID, err)
	}
	return out, nil
}

// GetHandle returns a handle to an existing run of wf, by run ID or workflow ID
// (its latest run). ErrRunNotFound when there is none; ErrInvalidParams when the
// run is of another workflow.
func GetHandle[In, Out any](ctx context.Context, c *Client, wf *Workflow[In, Out], ref string) (*Handle[Out], error) {
	run, err := c.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if run.Workflow != wf.Name() {
		return nil, fmt.Errorf("%w: run %s is of workflow %q, not %q", ErrInvalidParams, run.ID, run.Workflow, wf.Name())
	}
	return &Handle[Out]{c: c, id: run.WorkflowID, runID: run.ID}, nil
}

// Start starts a run of wf with input in. The run is durable before Start returns.
func Start[In, Out any](ctx context.Context, c *Client, wf *Workflow[In, Out], in In, opts ...StartOptions) (*Handle[Out], error) {
	return startWith(c, "trellis.Start", wf, in, opts, func(def *definition, input []byte, o StartOptions) (*Run, error) {
		return c.start(ctx, def, input, o)
	})
}

// startWith encodes in and creates the run with create, for Start and StartTx.
func startWith[In, Out any](c *Client, call string, wf *Workflow[In, Out], in In, opts []StartOptions,
	create func(def *definition, input []byte, o StartOptions) (*Run, error)) (*Handle[Out], error) {
	o, err := oneOption(call, opts)
	if err != nil {
		return nil, err
	}
	input, err := c.encode(in)
	if err != nil {
		return nil, err
	}
	run, err := create(wf.definition(), input, o)
	if err != nil {
		return nil, err
	}
	return &Handle[Out]{c: c, id: run.WorkflowID, runID: run.ID}, nil
}

// StartRaw starts a run of a workflow by name, with an encoded input (for tools,
// APIs and producers that hold no workflow code). When this client has registered
// the workflow, the run takes its queue and version and the input must decode into
// its input type (else ErrInvalidInput). When it has not, the run is created as
// given: the queue is o.Queue (default "default"), the version 0, and the input is
// not checked; a worker that registered the workflow runs it.
func (c *Client) StartRaw(ctx context.Context, workflow string, input []byte, o StartOptions) (*Run, error) {
	if workflow == "" {
		return nil, fmt.Errorf("starting run: %w: empty workflow name", ErrInvalidParams)
	}
	if len(input) > c.cfg.MaxPayloadBytes {
		return nil, fmt.Errorf("%w: input is %d bytes (limit %d)", ErrPayloadTooLarge, len(input), c.cfg.MaxPayloadBytes)
	}
	def, ok := c.reg.get(workflow)
	if !ok {
		def = &definition{name: workflow}
	} else if err := def.checkIn(c.cfg.Codec, input); err != nil {
		return nil, err
	}
	return c.start(ctx, def, input, o)
}

func (c *Client) start(ctx context.Context, def *definition, input []byte, o StartOptions) (*Run, error) {
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", def.name, err)
	}
	return callV(ctx, c, ClientCall{Method: "Start", Workflow: def.name, Ref: o.ID}, func(ctx context.Context) (*Run, error) {
		if err := checkVersion(o); err != nil {
			return nil, fmt.Errorf("starting %s: %w", def.name, err)
		}
		return c.b.start(ctx, def, input, o)
	})
}

// runParams are the parameters that create a run of def with ID runID, with the
// defaults of StartOptions: the workflow ID is the run ID, the queue the
// workflow's (else "default"). traceParent is the W3C trace context its
// executions join ("" for none).
func runParams(namespace string, def *definition, runID string, input []byte, o StartOptions, traceParent string) *store.RunCreateParams {
	p := &store.RunCreateParams{
		Namespace: namespace, ID: runID, WorkflowID: o.ID, Workflow: def.name,
		Queue: o.Queue, Priority: o.Priority, Version: def.opts.Version, Input: input, Reuse: store.ReusePolicy(o.Reuse),
		ConcurrencyKey: o.ConcurrencyKey, TraceParent: traceParent,
	}
	p.Retry, _ = o.Retry.runRetry() // checked by the caller (StartOptions.check)
	if o.Version != 0 {
		p.Version, p.Pinned = o.Version, true
	}
	if p.WorkflowID == "" {
		p.WorkflowID = runID
	}
	if p.Queue == "" {
		p.Queue = def.opts.Queue
	}
	if p.Queue == "" {
		p.Queue = "default"
	}
	if !o.Deadline.IsZero() {
		d := o.Deadline.UTC()
		p.Deadline = &d
	}
	if !o.StartAt.IsZero() {
		a := o.StartAt.UTC()
		p.AvailableAt = &a
	}
	return p
}

func (c *Client) encode(v any) ([]byte, error) {
	b, err := c.cfg.Codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding input: %w", err)
	}
	if len(b) > c.cfg.MaxPayloadBytes {
		return nil, fmt.Errorf("%w: input is %d bytes (limit %d)", ErrPayloadTooLarge, len(b), c.cfg.MaxPayloadBytes)
	}
	return b, nil
}

// check reports what of o cannot be used: a retry policy the store cannot
// apply.
func (o *StartOptions) check() error {
	if _, err := o.Retry.runRetry(); err != nil {
		return fmt.Errorf("StartOptions.Retry: %w", err)
	}
	return nil
}
