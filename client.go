package trellis

import (
	"github.com/trellis-dev/trellis/store/blobs"

	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/queuedefaults"
	"github.com/trellis-dev/trellis/internal/results"
	"github.com/trellis-dev/trellis/internal/retention"
	"github.com/trellis-dev/trellis/internal/schedule"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
)

// Client starts and inspects runs and, unless Config.Worker.Disabled, runs the
// workflows registered with it. Create one with Open; it is safe for concurrent use.
type Client struct {
	cfg       Config
	store     store.Store
	ownsStore bool
	reg       registry
	remote    *remote // set when the client works through a server (Config.Server)
	chain     *chain  // interceptors, the built-in ones first
	// wstore is the store of the worker role: the store, or the server's
	// worker protocol for a remote worker (NewWorker with Config.Server).
	wstore worker.Store
	wclose func() error // closes wstore when it is not the store
	worker *worker.Worker
	purger *retention.Purger // deletes expired runs; with the worker
	engine *engine.Engine
	// queues caches the default retry policies of queues for the worker's runs
	// (nil without a store of its own: a server fills them for a remote worker).
	queues    *queuedefaults.Cache
	results   *results.Watcher
	scheduler *schedule.Scheduler
	objects   objectCache // namespace and queue records, for the defaults of starts
	closeOnce sync.Once
	closeErr  error
}

// Open opens the store, runs its migrations, and starts the embedded worker.
func Open(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Server != "" {
		return openRemote(cfg)
	}
	c := &Client{cfg: cfg, store: cfg.Backend, chain: newChain(cfg.interceptors())}
	if c.store == nil {
		s, err := OpenStore(ctx, cfg.Store, cfg.Clock.Now)
		if err != nil {
			return nil, fmt.Errorf("opening trellis: %w", err)
		}
		c.store, c.ownsStore = s, true
	}
	c.wstore = c.store
	if err := c.newResults(); err != nil {
		c.closeStore()
		return nil, err
	}
	eng, err := engine.New(engine.Config{
		Store: c.store, Codec: cfg.Codec, Clock: cfg.Clock, Logger: cfg.Logger,
		MaxPayloadBytes: cfg.MaxPayloadBytes, MaxInlineBackoff: cfg.Worker.MaxInlineBackoff,
		CheckpointTimeout: cfg.Worker.LeaseDuration, Lookup: c.reg.lookup, ErrorType: errorType,
		StepOverride: cfg.StepOverride, InterceptStep: c.chain.interceptStep(),
		OnEnd: c.results.Ended,
	})
	if err != nil {
		c.closeStore()
		return nil, err
	}
	c.engine = eng
	c.results.Start()
	if !cfg.Worker.Disabled {
		w, err := worker.New(worker.Config{
			Store: c.store, Namespace: cfg.Namespace, Queues: cfg.Worker.Queues,
			Workflows: c.reg.names, Versions: c.reg.versions, Name: cfg.Worker.Name,
			Concurrency: cfg.Worker.Concurrency, ClaimBatch: cfg.Worker.ClaimBatch,
			LeaseDuration: cfg.Worker.LeaseDuration, HeartbeatInterval: cfg.Worker.HeartbeatInterval,
			ShutdownGrace: cfg.Worker.ShutdownGrace, PollInterval: cfg.Worker.PollInterval,
			Logger: cfg.Logger, Clock: cfg.Clock, OnClaim: cfg.onClaim(),
			OnEndedAttempts: cfg.onEndedAttempts(), StepTimeoutGrace: cfg.Worker.StepTimeoutGrace,
		}, &executor{eng: c.engine, chain: c.chain, queues: c.queueDefaults()})
		if err != nil {
			c.results.Stop()
			c.closeStore()
			return nil, err
		}
		c.worker = w
		w.Start()
		if !cfg.Scheduler.Disabled {
			sch, err := schedule.New(schedule.Config{Store: c.store, Owner: w.Name(), Clock: cfg.Clock,
				LeaseDuration: cfg.Scheduler.LeaseDuration, Interval: cfg.Scheduler.Interval,
				Version: c.version, Started: c.scheduledStart, Logger: cfg.Logger})
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("opening trellis: %w", err)
			}
			c.scheduler = sch
			sch.Start()
		}
		if cfg.Worker.RetentionInterval >= 0 {
			c.purger = retention.New(retention.Config{Store: c.store, Interval: cfg.Worker.RetentionInterval,
				Logger: cfg.Logger, Clock: cfg.Clock})
			c.purger.Start()
		}
	}
	if cfg.Metrics != nil {
		cfg.Metrics.attach(c)
	}
	return c, nil
}

// openRemote returns a client that works through a server: no store, engine,
// results watcher or worker.
func openRemote(cfg Config) (*Client, error) {
	r, err := newRemote(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, remote: r, chain: newChain(cfg.interceptors())}, nil
}

// newResults creates the client's results watcher, before the engine that
// reports the ends of the runs it executes to it (engine.Config.OnEnd).
func (c *Client) newResults() error {
	res, err := results.New(results.Config{
		Store: c.store, Namespace: c.cfg.Namespace, PollInterval: c.cfg.Worker.PollInterval, Logger: c.cfg.Logger,
		Executing: func(runID string) bool { return c.engine.Executing(runID) },
	})
	c.results = res
	return err
}

// Register makes workflows known to this client, so its worker runs them and
// StartRaw applies their queue, version and input check. Blocked runs of these workflows are resumed: a new
// deploy gets a chance to replay them. With a worker, Register returns once the
// worker's record in the store lists them, so that other processes (a server, the
// CLI) see them served from then on. A client opened on a Server runs no worker
// (Config.Server): there Register only informs StartRaw; NewWorker runs them.
func (c *Client) Register(ctx context.Context, wfs ...Registrable) error {
	return c.call(ctx, ClientCall{Method: "Register"}, func(ctx context.Context) error { return c.doRegister(ctx, wfs...) })
}

// doRegister is Register without the call interceptors.
func (c *Client) doRegister(ctx context.Context, wfs ...Registrable) error {
	names := make([]string, 0, len(wfs))
	for _, wf := range wfs {
		if err := c.reg.add(wf.definition()); err != nil {
			return err
		}
		names = append(names, wf.Name())
	}
	if c.worker == nil {
		return nil
	}
	if _, err := c.wstore.RunsResumeBlocked(ctx, &store.RunsResumeBlockedParams{Namespace: c.cfg.Namespace, Workflows: names,
		Queues: c.cfg.Worker.Queues}); err != nil {
		return fmt.Errorf("resuming blocked runs: %w", err)
	}
	// Once Register returns, every process on the store sees these workflows
	// served: their pending runs read no "no live worker" wait reason, and the
	// CLI does not warn of a schedule of them.
	if err := c.worker.Announce(ctx); err != nil {
		return err
	}
	c.worker.Wake()
	return nil
}

// Close stops the worker gracefully (active runs get Worker.ShutdownGrace to finish,
// then are handed back) and closes the store. Idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		if c.scheduler != nil {
			// First, so that the lease passes to another process at once.
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Worker.LeaseDuration)
			if err := c.scheduler.Stop(ctx); err != nil {
				c.closeErr = fmt.Errorf("stopping scheduler: %w", err)
			}
			cancel()
		}
		if c.worker != nil {
			// The grace, then a lease's time for the executors to hand runs back.
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Worker.ShutdownGrace+c.cfg.Worker.LeaseDuration)
			defer cancel()
			if err := c.worker.Stop(ctx); err != nil {
				c.closeErr = err
			}
		}
		if c.purger != nil {
			c.purger.Stop()
		}
		if c.remote != nil {
			c.remote.close()
		}
		if m := c.cfg.Metrics; m != nil && c.store != nil {
			m.detach(c)
		}
		if c.wclose != nil {
			c.wclose()
		}
		if c.results != nil {
			c.results.Stop() // after the worker: runs finishing in its grace reach their callers
		}
		if err := c.closeStore(); err != nil && c.closeErr == nil {
			c.closeErr = err
		}
	})
	return c.closeErr
}

func (c *Client) closeStore() error {
	if c.ownsStore && c.store != nil {
		return c.store.Close()
	}
	return nil
}

// doGet is Get without the call interceptors.
func (c *Client) doGet(ctx context.Context, ref string) (*Run, error) {
	if c.remote != nil {
		return c.remote.get(ctx, ref)
	}
	r, err := c.store.RunGet(ctx, &store.RunGetParams{Namespace: c.cfg.Namespace, Ref: ref, OmitLarge: blobs.OmitLarge(ctx)})
	if err != nil {
		return nil, err
	}
	return runFromStore(r), nil
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

// doList is List without the call interceptors.
func (c *Client) doList(ctx context.Context, o ListOptions) (*RunPage, error) {
	if c.remote != nil {
		return c.remote.list(ctx, o)
	}
	res, err := c.store.RunList(ctx, &store.RunListParams{
		Namespace: c.cfg.Namespace, Statuses: statusesToStore(o.Statuses), Workflow: o.Workflow, WorkflowID: o.WorkflowID, Queue: o.Queue,
		CreatedAfter: o.CreatedAfter, CreatedBefore: o.CreatedBefore, Limit: o.Limit, Cursor: o.Cursor,
	})
	if err != nil {
		return nil, err
	}
	return &RunPage{Runs: runsFromStore(res.Runs), NextCursor: res.NextCursor}, nil
}

// Children returns the child runs that the child op at position of a run (by
// run ID or workflow ID) started: one, or a Map's items in item order. None for
// a position that started no child.
func (c *Client) Children(ctx context.Context, ref string, position int) ([]*Run, error) {
	return callV(ctx, c, ClientCall{Method: "Children", Ref: ref}, func(ctx context.Context) ([]*Run, error) { return c.doChildren(ctx, ref, position) })
}

// doChildren is Children without the call interceptors.
func (c *Client) doChildren(ctx context.Context, ref string, position int) ([]*Run, error) {
	if c.remote != nil {
		return c.remote.children(ctx, ref, position)
	}
	run, err := c.doGet(ctx, ref)
	if err != nil {
		return nil, err
	}
	kids, err := c.store.RunChildren(ctx, &store.RunChildrenParams{Namespace: c.cfg.Namespace, Parent: run.ID, Position: position})
	if err != nil {
		return nil, err
	}
	return runsFromStore(kids), nil
}

// doHistory is History without the call interceptors.
func (c *Client) doHistory(ctx context.Context, ref string) ([]*Op, error) {
	if c.remote != nil {
		return c.remote.history(ctx, ref)
	}
	ops, err := c.store.HistoryList(ctx, &store.HistoryListParams{Namespace: c.cfg.Namespace, Ref: ref})
	if err != nil {
		return nil, err
	}
	return opsFromStore(ops), nil
}

// doCancel is Cancel without the call interceptors.
func (c *Client) doCancel(ctx context.Context, ref string) error {
	if c.remote != nil {
		_, err := c.remote.act(ctx, ref, "cancel")
		return err
	}
	run, err := c.store.RunCancel(ctx, &store.RunCancelParams{Namespace: c.cfg.Namespace, Ref: ref,
		Idempotency: idempotency(ctx, changedRun)})
	if err != nil {
		return err
	}
	if c.worker != nil {
		c.worker.RequestCancel(run.ID)
	}
	return nil
}

// doResume is Resume without the call interceptors.
func (c *Client) doResume(ctx context.Context, ref string) error {
	if c.remote != nil {
		_, err := c.remote.act(ctx, ref, "resume")
		return err
	}
	_, err := c.store.RunResume(ctx, &store.RunResumeParams{Namespace: c.cfg.Namespace, Ref: ref,
		Idempotency: idempotency(ctx, changedRun)})
	return err
}

// doValue is Value without the call interceptors.
func (c *Client) doValue(ctx context.Context, ref, key string, v any) error {
	var b []byte
	var err error
	if c.remote != nil {
		b, err = c.remote.value(ctx, ref, key)
	} else {
		b, err = c.store.KVGet(ctx, &store.KVGetParams{Namespace: c.cfg.Namespace, Ref: ref, Key: key})
	}
	if err != nil {
		return err
	}
	return c.cfg.Codec.Unmarshal(b, v)
}

// doWait is Wait without the call interceptors.
func (c *Client) doWait(ctx context.Context, ref string) (*Run, error) {
	if c.remote != nil {
		return c.remote.wait(ctx, ref)
	}
	// ref is most often a run ID: wait for that run at once, which reads it
	// together with the other runs waited for (one batched read) instead of
	// reading it alone first. A ref that names no run ID (a workflow ID) is
	// resolved then.
	run, err := c.waitRun(ctx, ref)
	if !errors.Is(err, ErrRunNotFound) {
		return run, err
	}
	if run, err = c.doGet(ctx, ref); err != nil || run.Status.Terminal() {
		return run, err
	}
	return c.waitRun(ctx, run.ID)
}

// waitRun waits for the run with this exact ID: from the engine when the run
// executes in this process, else through the client's results watcher (one
// batched read for many callers; see internal/results); through a server, by
// long polls of its result.
func (c *Client) waitRun(ctx context.Context, runID string) (*Run, error) {
	if c.remote != nil {
		return c.remote.wait(ctx, runID)
	}
	if done, ok := c.engine.Outcome(runID); ok {
		select {
		case run := <-done:
			if run != nil {
				return runFromStore(run), nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	run, err := c.results.Wait(ctx, runID)
	if err != nil {
		return nil, err
	}
	return runFromStore(run), nil
}

// runError turns a finished, unsuccessful run into its error.
func runError(run *Run) error {
	e := &RunError{RunID: run.ID, Status: run.Status}
	if run.Error != nil {
		e.Message, e.Type = run.Error.Message, run.Error.Type
	}
	return e
}

// queueDefaults returns the client's cache of queues' default retry policies,
// made on first use; nil for a client without a store of its own.
func (c *Client) queueDefaults() *queuedefaults.Cache {
	if c.store == nil {
		return nil
	}
	if c.queues == nil {
		c.queues = queuedefaults.New(c.store, c.cfg.Logger)
	}
	return c.queues
}
