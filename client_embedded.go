package trellis

import (
	"context"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/handoff"
	"github.com/trellis-dev/trellis/internal/idemkey"
	"github.com/trellis-dev/trellis/internal/results"
	"github.com/trellis-dev/trellis/internal/streams"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
)

// embedded is the backend of a client on a store (Open without
// Config.Server): a core (the store, the namespace and queue records, the
// scheduler and the purger), the engine, the worker (unless
// Config.Worker.Disabled) and the results watcher that Wait and Handle.Result
// use. Its methods are the client's calls on the store, in the client's
// namespace; the other embedded_*.go files hold those of starts, namespaces
// and queues, and schedules. On a server, an embedded backend is made for each
// request, on the server's core, with the request's calls.
type embedded struct {
	*core
	owner bool      // the core is this client's: it stops and closes it
	cfg   *Config   // the client's
	reg   *registry // the client's
	calls calls
	workerRole
	// results is the results watcher (nil for a request of a server's: its
	// core's watcher of the namespace, see watcher).
	results *results.Watcher
}

// calls is what a server's request adds to the embedded backend's
// operations: the idempotency key to record with the change (nil: none), and
// the hand-off of the runs it starts to the server's waiting remote workers
// (nil: none). An embedded client's calls are the zero value.
type calls struct {
	idem    *idemkey.Request
	handoff handoff.Offer
}

// openEmbedded opens c's store (unless Config.Backend), its engine and
// results watcher and, unless Config.Worker.Disabled, its worker, scheduler
// and purger.
func openEmbedded(ctx context.Context, c *Client) (*embedded, error) {
	cfg := &c.cfg
	e := &embedded{core: &core{store: cfg.Backend, logger: cfg.Logger}, owner: true, cfg: cfg, reg: &c.reg}
	if e.store == nil {
		s, err := OpenStore(ctx, cfg.Store, cfg.Clock.Now)
		if err != nil {
			return nil, fmt.Errorf("opening trellis: %w", err)
		}
		e.store, e.ownsStore = s, true
	}
	e.wstore = e.store
	if err := e.newResults(); err != nil {
		e.closeStore()
		return nil, err
	}
	eng, err := engine.New(engine.Config{
		Store: e.store, Codec: cfg.Codec, Clock: cfg.Clock, Logger: cfg.Logger,
		MaxPayloadBytes: cfg.MaxPayloadBytes, MaxInlineBackoff: cfg.Worker.MaxInlineBackoff,
		CheckpointTimeout: cfg.Worker.LeaseDuration, Lookup: c.reg.lookup, ErrorType: errorType,
		StepOverride: cfg.StepOverride, InterceptStep: c.chain.interceptStep(),
		OnEnd: e.results.Ended,
	})
	if err != nil {
		e.closeStore()
		return nil, err
	}
	e.engine = eng
	e.results.Start()
	if !cfg.Worker.Disabled {
		w, err := worker.New(worker.Config{
			Store: e.store, Namespace: cfg.Namespace, Queues: cfg.Worker.Queues,
			Workflows: c.reg.names, Versions: c.reg.versions, Name: cfg.Worker.Name,
			Concurrency: cfg.Worker.Concurrency, ClaimBatch: cfg.Worker.ClaimBatch,
			LeaseDuration: cfg.Worker.LeaseDuration, HeartbeatInterval: cfg.Worker.HeartbeatInterval,
			ShutdownGrace: cfg.Worker.ShutdownGrace, PollInterval: cfg.Worker.PollInterval,
			Logger: cfg.Logger, Clock: cfg.Clock, OnClaim: cfg.onClaim(),
			OnEndedAttempts: cfg.onEndedAttempts(), StepTimeoutGrace: cfg.Worker.StepTimeoutGrace,
		}, &executor{eng: e.engine, chain: c.chain, queues: e.queueDefaults()})
		if err != nil {
			e.results.Stop()
			e.closeStore()
			return nil, err
		}
		e.worker = w
		w.Start()
		// The scheduler and the purger run with the worker.
		if err := e.startBackground(background{Scheduler: !cfg.Scheduler.Disabled, Owner: w.Name(),
			SchedulerLease: cfg.Scheduler.LeaseDuration, SchedulerInterval: cfg.Scheduler.Interval,
			Version: e.version, Started: e.scheduledStart, RetentionInterval: cfg.Worker.RetentionInterval,
			Clock: cfg.Clock, Logger: cfg.Logger}); err != nil {
			e.shutdown()
			return nil, fmt.Errorf("opening trellis: %w", err)
		}
		e.startScheduler()
	}
	if cfg.Metrics != nil {
		cfg.Metrics.attach(e)
	}
	return e, nil
}

// newResults creates the results watcher, before the engine that reports the
// ends of the runs it executes to it (engine.Config.OnEnd).
func (e *embedded) newResults() error {
	res, err := results.New(results.Config{
		Store: e.store, Namespace: e.cfg.Namespace, PollInterval: e.cfg.Worker.PollInterval, Logger: e.cfg.Logger,
		Executing: func(runID string) bool { return e.engine.Executing(runID) },
	})
	e.results = res
	return err
}

func (e *embedded) register(ctx context.Context, names []string) error {
	return e.serve(ctx, e.cfg, names)
}

func (e *embedded) shutdown() error {
	if !e.owner {
		return nil
	}
	// The scheduler first, so that its lease passes to another process at once.
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Worker.LeaseDuration)
	err := e.stopScheduler(ctx)
	cancel()
	if werr := e.stopWorker(e.cfg); werr != nil {
		err = werr
	}
	e.stopPurger()
	if m := e.cfg.Metrics; m != nil {
		m.detach(e)
	}
	e.results.Stop() // after the worker: runs finishing in its grace reach their callers
	if cerr := e.closeStore(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// idempotency returns the store record of the idempotency key of the
// server's request (calls.idem), or nil when there is none: the guarded call
// writes it in the transaction of its change. converter names the function
// (converters) that turns the store's result into the SDK value the server
// renders its response from.
func (e *embedded) idempotency(converter string) *store.IdempotencyRecord {
	r := e.calls.idem
	if r == nil {
		return nil
	}
	sdk := converters[converter]
	return &store.IdempotencyRecord{Key: r.Key, Fingerprint: r.Fingerprint,
		Response: func(result any) (int, []byte, error) { return r.Render(sdk(result)) },
		Renderer: rendererPrefix + converter, Status: r.Status}
}

func (e *embedded) get(ctx context.Context, ref string) (*Run, error) {
	r, err := e.store.RunGet(ctx, &store.RunGetParams{Namespace: e.cfg.Namespace, Ref: ref, OmitLarge: blobs.OmitLarge(ctx)})
	if err != nil {
		return nil, err
	}
	return runFromStore(r), nil
}

func (e *embedded) list(ctx context.Context, o ListOptions) (*RunPage, error) {
	res, err := e.store.RunList(ctx, &store.RunListParams{
		Namespace: e.cfg.Namespace, Statuses: statusesToStore(o.Statuses), Workflow: o.Workflow, WorkflowID: o.WorkflowID, Queue: o.Queue,
		CreatedAfter: o.CreatedAfter, CreatedBefore: o.CreatedBefore, Limit: o.Limit, Cursor: o.Cursor,
	})
	if err != nil {
		return nil, err
	}
	return &RunPage{Runs: runsFromStore(res.Runs), NextCursor: res.NextCursor}, nil
}

func (e *embedded) children(ctx context.Context, ref string, position int) ([]*Run, error) {
	run, err := e.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	kids, err := e.store.RunChildren(ctx, &store.RunChildrenParams{Namespace: e.cfg.Namespace, Parent: run.ID, Position: position})
	if err != nil {
		return nil, err
	}
	return runsFromStore(kids), nil
}

func (e *embedded) history(ctx context.Context, ref string) ([]*Op, error) {
	ops, err := e.store.HistoryList(ctx, &store.HistoryListParams{Namespace: e.cfg.Namespace, Ref: ref})
	if err != nil {
		return nil, err
	}
	return opsFromStore(ops), nil
}

func (e *embedded) exportHistory(ctx context.Context, ref string) (*RecordedHistory, error) {
	run, err := e.get(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("exporting history: %w", err)
	}
	ops, err := e.history(ctx, run.ID)
	if err != nil {
		return nil, fmt.Errorf("exporting history: %w", err)
	}
	h := &RecordedHistory{Format: HistoryFormat, Run: *run, Ops: make([]HistoryOp, len(ops))}
	for i, op := range ops {
		h.Ops[i] = HistoryOp{Op: *op}
		if op.Kind != OpChild {
			continue
		}
		kids, err := e.children(ctx, run.ID, op.Position)
		if err != nil {
			return nil, fmt.Errorf("exporting history: reading children at %d: %w", op.Position, err)
		}
		for _, k := range kids {
			h.Ops[i].Children = append(h.Ops[i].Children, HistoryChild{ID: k.ID, Workflow: k.Workflow, Status: k.Status, Output: k.Output, Error: k.Error})
		}
	}
	return h, nil
}

func (e *embedded) value(ctx context.Context, ref, key string) (Payload, error) {
	return e.store.KVGet(ctx, &store.KVGetParams{Namespace: e.cfg.Namespace, Ref: ref, Key: key})
}

func (e *embedded) cancel(ctx context.Context, ref string) error {
	run, err := e.store.RunCancel(ctx, &store.RunCancelParams{Namespace: e.cfg.Namespace, Ref: ref,
		Idempotency: e.idempotency("changedRun")})
	if err != nil {
		return err
	}
	if e.worker != nil {
		e.worker.RequestCancel(run.ID)
	}
	return nil
}

func (e *embedded) resume(ctx context.Context, ref string) error {
	_, err := e.store.RunResume(ctx, &store.RunResumeParams{Namespace: e.cfg.Namespace, Ref: ref,
		Idempotency: e.idempotency("changedRun")})
	return err
}

func (e *embedded) delete(ctx context.Context, ref string) error {
	_, err := e.store.RunDelete(ctx, &store.RunDeleteParams{Namespace: e.cfg.Namespace, Ref: ref,
		Idempotency: e.idempotency("noResult")})
	return err
}

func (e *embedded) wait(ctx context.Context, ref string) (*Run, error) {
	// ref is most often a run ID: wait for that run at once, which reads it
	// together with the other runs waited for (one batched read) instead of
	// reading it alone first. A ref that names no run ID (a workflow ID) is
	// resolved then.
	run, err := e.waitRun(ctx, ref)
	if !errors.Is(err, ErrRunNotFound) {
		return run, err
	}
	if run, err = e.get(ctx, ref); err != nil || run.Status.Terminal() {
		return run, err
	}
	return e.waitRun(ctx, run.ID)
}

// waitRun waits for the run with this exact ID: from the engine when the run
// executes in this process, else through the results watcher (one batched
// read for many callers; see internal/results).
func (e *embedded) waitRun(ctx context.Context, runID string) (*Run, error) {
	if e.engine != nil {
		if done, ok := e.engine.Outcome(runID); ok {
			select {
			case run := <-done:
				if run != nil {
					return runFromStore(run), nil
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	w, release, err := e.watcher()
	if err != nil {
		return nil, err
	}
	defer release()
	run, err := w.Wait(ctx, runID)
	if err != nil {
		return nil, err
	}
	return runFromStore(run), nil
}

// watcher returns the results watcher of the client's namespace: the
// client's, or on a server its core's (server_core.go), and a function to
// call when the wait is over.
func (e *embedded) watcher() (*results.Watcher, func(), error) {
	if e.results != nil {
		return e.results, func() {}, nil
	}
	return e.core.watcher(e.cfg.Namespace, e.cfg.Worker.PollInterval)
}

// lastingWatcher returns the results watcher the client's waits go through
// when it outlasts them (the client's, or its server core's kept one for the
// namespace, once a wait made it), else nil.
func (e *embedded) lastingWatcher() *results.Watcher {
	if e.results != nil {
		return e.results
	}
	return e.core.keptWatcher(e.cfg.Namespace)
}

func (e *embedded) sendEvent(ctx context.Context, ref, name string, b []byte) error {
	if err := e.eventLimit(ctx, ref, name, len(b)); err != nil {
		return err
	}
	p := &store.EventSendParams{Namespace: e.cfg.Namespace, Ref: ref, Name: name, Payload: b,
		Idempotency: e.idempotency("noResult")}
	// If the event wakes a run this process's worker runs and it has a free
	// slot, the store leases the run to it in the same transaction.
	reserved := e.worker != nil && e.worker.Reserve()
	sctx := ctx
	if reserved {
		p.Claim = &store.EventClaim{Worker: e.worker.Name(), LeaseDuration: e.worker.LeaseDuration(),
			Workflows: e.reg.names(), Queues: e.cfg.Worker.Queues, Versions: e.reg.versions()}
		var cancel context.CancelFunc
		sctx, cancel = claimedCreateContext(ctx, p.Claim.LeaseDuration)
		defer cancel()
	}
	res, err := e.store.EventSend(sctx, p)
	switch {
	case reserved && err == nil && res.Claimed != nil:
		e.engine.Begin(res.Claimed.Run.ID)
		e.worker.Launch(res.Claimed)
	case reserved:
		e.worker.Unreserve()
	}
	return err
}

func (e *embedded) stream(ctx context.Context, runID string, after int64, yield func(*StreamEvent, error) bool) {
	stopped := errors.New("stopped")
	err := streams.Follow(ctx, e.store, e.cfg.Namespace, runID, after, streams.Options{},
		func(ev *store.StreamEvent) error {
			if !yield(&StreamEvent{Sequence: ev.Sequence, Name: ev.Name, Data: ev.Data, At: ev.At}, nil) {
				return stopped
			}
			return nil
		})
	if err != nil && !errors.Is(err, stopped) {
		yield(nil, fmt.Errorf("streaming run %s: %w", runID, err))
	}
}

func (e *embedded) approvals(ctx context.Context, f ApprovalFilter) (*ApprovalList, error) {
	res, err := e.store.ApprovalList(ctx, &store.ApprovalListParams{Namespace: e.cfg.Namespace,
		Statuses: approvalStatusesToStore(f.Statuses), Run: f.Run, Limit: f.Limit, Cursor: f.Cursor})
	if err != nil {
		return nil, err
	}
	page := &ApprovalList{Approvals: make([]*ApprovalRecord, len(res.Approvals)), NextCursor: res.NextCursor}
	for i, a := range res.Approvals {
		page.Approvals[i] = approvalFromStore(a)
	}
	return page, nil
}

func (e *embedded) getApproval(ctx context.Context, id string) (*ApprovalRecord, error) {
	a, err := e.store.ApprovalGet(ctx, &store.ApprovalGetParams{Namespace: e.cfg.Namespace, ID: id})
	if err != nil {
		return nil, err
	}
	return approvalFromStore(a), nil
}

func (e *embedded) decide(ctx context.Context, id string, approve bool, principal, comment string) (*ApprovalRecord, error) {
	a, err := e.store.ApprovalDecide(ctx, &store.ApprovalDecideParams{Namespace: e.cfg.Namespace, ID: id,
		Approve: approve, Principal: principal, Comment: comment, Idempotency: e.idempotency("decided")})
	if err != nil {
		return nil, err
	}
	return approvalFromStore(a), nil
}

func (e *embedded) workers(ctx context.Context) ([]*WorkerRecord, error) {
	ws, err := e.store.WorkerList(ctx, &store.WorkerListParams{Namespace: e.cfg.Namespace})
	if err != nil {
		return nil, err
	}
	out := make([]*WorkerRecord, len(ws))
	for i, w := range ws {
		out[i] = &WorkerRecord{Namespace: w.Namespace, Name: w.Name, Workflows: nonNil(w.Workflows),
			Queues: nonNil(w.Queues), Versions: w.Versions, Version: w.Version, StartedAt: w.StartedAt, LastSeenAt: w.LastSeenAt,
			ExpiresAt: w.ExpiresAt, Live: w.Live, Owner: w.Owner}
	}
	return out, nil
}
