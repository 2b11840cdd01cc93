package trellis

import (
	"context"
	"sync"
	"time"
)

// Client starts and inspects runs and, unless Config.Worker.Disabled, runs the
// workflows registered with it. Create one with Open; it is safe for concurrent use.
//
// A Client is a facade: each method runs the call interceptors around one call
// of its backend, which is embedded (the store, engine, worker, results watcher,
// scheduler and purger in this process: client_embedded.go) or remote (a
// server's HTTP API, Config.Server: client_remote.go).
type Client struct {
	cfg       Config
	reg       registry
	chain     *chain  // interceptors, the built-in ones first
	b         backend // embedded or remote
	closeOnce sync.Once
	closeErr  error
}

// backend is what a Client's methods call: the embedded implementation
// (embedded) or the remote one (remote). Arguments are checked by the facade
// when the check is the same for both; each implementation returns the errors
// of what it cannot do (ErrRemoteUnsupported, ErrTxNotSupported).
type backend interface {
	// register makes names (just added to the client's registry) served by
	// the backend's worker, if it has one.
	register(ctx context.Context, names []string) error
	// shutdown stops the worker and what else runs in the background, and
	// releases the store or the connections.
	shutdown() error

	start(ctx context.Context, def *definition, input []byte, o StartOptions) (*Run, error)
	startTx(ctx context.Context, tx any, def *definition, input []byte, o StartOptions) (*Run, error)
	startMany(ctx context.Context, reqs []StartRequest) ([]StartResult, error)
	// namespaceQueue is the queue of a start whose options and workflow name
	// none: the default queue of the namespace's record, else "default".
	namespaceQueue(ctx context.Context) (string, error)
	get(ctx context.Context, ref string) (*Run, error)
	list(ctx context.Context, o ListOptions) (*RunPage, error)
	children(ctx context.Context, ref string, position int) ([]*Run, error)
	history(ctx context.Context, ref string) ([]*Op, error)
	exportHistory(ctx context.Context, ref string) (*RecordedHistory, error)
	value(ctx context.Context, ref, key string) (Payload, error)
	cancel(ctx context.Context, ref string) error
	resume(ctx context.Context, ref string) error
	delete(ctx context.Context, ref string) error
	reset(ctx context.Context, ref, step string) (*Run, error)
	// wait waits for a run by run ID or workflow ID, waitRun for the run with
	// this exact ID, to reach a final state.
	wait(ctx context.Context, ref string) (*Run, error)
	waitRun(ctx context.Context, runID string) (*Run, error)
	sendEvent(ctx context.Context, ref, name string, payload []byte) error
	stream(ctx context.Context, runID string, after int64, yield func(*StreamEvent, error) bool)

	approvals(ctx context.Context, f ApprovalFilter) (*ApprovalList, error)
	getApproval(ctx context.Context, id string) (*ApprovalRecord, error)
	decide(ctx context.Context, id string, approve bool, principal, comment string) (*ApprovalRecord, error)

	workers(ctx context.Context) ([]*WorkerRecord, error)

	createNamespace(ctx context.Context, o NamespaceOptions) (*Namespace, error)
	getNamespace(ctx context.Context, name string) (*Namespace, error)
	listNamespaces(ctx context.Context) ([]*Namespace, error)
	updateNamespace(ctx context.Context, u NamespaceUpdate) (*Namespace, error)
	createQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error)
	getQueue(ctx context.Context, name string) (*Queue, error)
	listQueues(ctx context.Context) ([]*Queue, error)
	updateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error)
	setQueuePaused(ctx context.Context, name string, paused bool) (*Queue, error)

	createSchedule(ctx context.Context, name string, spec ScheduleSpec, o CreateScheduleOptions) (*Schedule, error)
	getSchedule(ctx context.Context, name string) (*Schedule, error)
	listSchedules(ctx context.Context) ([]*Schedule, error)
	updateSchedule(ctx context.Context, name string, spec ScheduleSpec) (*Schedule, error)
	pauseSchedule(ctx context.Context, name string, paused bool) (*Schedule, error)
	deleteSchedule(ctx context.Context, name string) error
	triggerSchedule(ctx context.Context, name string) (*Run, error)
	backfillSchedule(ctx context.Context, name string, start, end time.Time) ([]*Run, error)
}

// Open opens the store, runs its migrations, and starts the embedded worker;
// with Config.Server, it opens a client of that server instead (no store, no
// worker: NewWorker runs workflows through a server).
func Open(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, chain: newChain(cfg.interceptors())}
	var err error
	if cfg.Server != "" {
		c.b, err = newRemoteBackend(c)
	} else {
		c.b, err = openEmbedded(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Register makes workflows known to this client, so its worker runs them and
// StartRaw applies their queue, version and input check. Blocked runs of these workflows are resumed: a new
// deploy gets a chance to replay them. With a worker, Register returns once the
// worker's record in the store lists them, so that other processes (a server, the
// CLI) see them served from then on. A client opened on a Server runs no worker
// (Config.Server): there Register only informs StartRaw; NewWorker runs them.
func (c *Client) Register(ctx context.Context, wfs ...Registrable) error {
	return c.call(ctx, ClientCall{Method: "Register"}, func(ctx context.Context) error {
		names := make([]string, 0, len(wfs))
		for _, wf := range wfs {
			if err := c.reg.add(wf.definition()); err != nil {
				return err
			}
			names = append(names, wf.Name())
		}
		return c.b.register(ctx, names)
	})
}

// Close stops the worker gracefully (active runs get Worker.ShutdownGrace to finish,
// then are handed back) and closes the store. Idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.b.shutdown() })
	return c.closeErr
}

// Get returns a run by run ID or workflow ID (the latest run with that ID).
func (c *Client) Get(ctx context.Context, ref string) (*Run, error) {
	return callV(ctx, c, ClientCall{Method: "Get", Ref: ref}, func(ctx context.Context) (*Run, error) { return c.b.get(ctx, ref) })
}

// ListOptions filter List. Zero fields do not filter.
type ListOptions struct {
	Statuses      []Status
	Workflow      string
	WorkflowID    string
	Queue         string
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Limit is the page size; default 100, at most 1000.
	Limit int
	// Cursor continues from a previous page's NextCursor.
	Cursor string
}

// List lists runs, newest first.
func (c *Client) List(ctx context.Context, o ListOptions) (*RunPage, error) {
	return callV(ctx, c, ClientCall{Method: "List"}, func(ctx context.Context) (*RunPage, error) { return c.b.list(ctx, o) })
}

// Children returns the child runs that the child op at position of a run (by
// run ID or workflow ID) started: one, or a Map's items in item order. None for
// a position that started no child.
func (c *Client) Children(ctx context.Context, ref string, position int) ([]*Run, error) {
	return callV(ctx, c, ClientCall{Method: "Children", Ref: ref}, func(ctx context.Context) ([]*Run, error) {
		return c.b.children(ctx, ref, position)
	})
}

// History returns a run's ops in position order, with every failed attempt.
func (c *Client) History(ctx context.Context, ref string) ([]*Op, error) {
	return callV(ctx, c, ClientCall{Method: "History", Ref: ref}, func(ctx context.Context) ([]*Op, error) { return c.b.history(ctx, ref) })
}

// Cancel cancels a run. A run that has not started ends cancelled at once; a running
// or waiting run stops at its next op (its current step's context is cancelled), may
// run cleanup steps through Context.Detached, and ends cancelled.
func (c *Client) Cancel(ctx context.Context, ref string) error {
	return c.call(ctx, ClientCall{Method: "Cancel", Ref: ref}, func(ctx context.Context) error { return c.b.cancel(ctx, ref) })
}

// Resume makes a blocked run pending again, to replay with the code now deployed.
func (c *Client) Resume(ctx context.Context, ref string) error {
	return c.call(ctx, ClientCall{Method: "Resume", Ref: ref}, func(ctx context.Context) error { return c.b.resume(ctx, ref) })
}

// Wait blocks until the run reaches a final state and returns it. It is woken by a
// push from the store; changes from other processes without push are seen within
// Worker.PollInterval. Through a server, Wait long-polls the run's result, and
// rides out a server restart: a server it cannot reach is tried again with
// backoff (100 ms doubling to 2 s), ErrUnavailable after ten tries in a row
// (about 12 s). Handle.Result waits the same way.
func (c *Client) Wait(ctx context.Context, ref string) (*Run, error) {
	return callV(ctx, c, ClientCall{Method: "Wait", Ref: ref}, func(ctx context.Context) (*Run, error) { return c.b.wait(ctx, ref) })
}

// Value decodes the value a run stored under key (Context.Set) into v.
func (c *Client) Value(ctx context.Context, ref, key string, v any) error {
	return c.call(ctx, ClientCall{Method: "Value", Ref: ref}, func(ctx context.Context) error {
		b, err := c.b.value(ctx, ref, key)
		if err != nil {
			return err
		}
		return c.cfg.Codec.Unmarshal(b, v)
	})
}

// callV is call for a method that returns a value.
func callV[T any](ctx context.Context, c *Client, cc ClientCall, f func(context.Context) (T, error)) (v T, err error) {
	err = c.call(ctx, cc, func(ctx context.Context) error {
		v, err = f(ctx)
		return err
	})
	return v, err
}

// runError turns a finished, unsuccessful run into its error.
func runError(run *Run) error {
	e := &RunError{RunID: run.ID, Status: run.Status}
	if run.Error != nil {
		e.Message, e.Type = run.Error.Message, run.Error.Type
	}
	return e
}
