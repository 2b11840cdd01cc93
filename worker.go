package trellis

import (
	"context"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/internal/workertransport"
	"github.com/trellis-dev/trellis/store"
)

// Worker runs registered workflows in a process of its own: the shape of a
// worker's main. It claims runs of its namespace and queues from the store,
// executes them, and shuts down gracefully when Run's context ends. Runs are
// started elsewhere: by a Client in another process (which needs no workflow code,
// see Client.StartRaw), the CLI (trellis runs start) or this worker's own Client.
//
//	w, err := trellis.NewWorker(ctx, trellis.Config{Store: url})
//	if err != nil { ... }
//	if err := w.Register(ctx, charge, refund); err != nil { ... }
//	err = w.Run(ctx) // until SIGTERM cancels ctx
//
// Open is the embedded shortcut: one Client that both starts runs and executes
// them, with direct dispatch of the runs it starts to its own worker.
type Worker struct {
	c *Client
}

// NewWorker opens the store named by cfg (cfg.Worker configures the worker) and
// starts claiming runs of the workflows registered with Register.
//
// With cfg.Server (and cfg.Token) instead of a store, the worker is remote: it
// runs the same workflow code through the server's worker protocol
// (docs/worker-protocol.md), holds no database credentials, has claims pushed
// to it as runs become due, and reconnects with backoff when the server
// restarts. Its Client calls the server's HTTP API.
func NewWorker(ctx context.Context, cfg Config) (*Worker, error) {
	if cfg.Worker.Disabled {
		return nil, errors.New("trellis worker: Config.Worker.Disabled is set")
	}
	if cfg.Server != "" {
		return newRemoteWorker(cfg)
	}
	c, err := Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Worker{c: c}, nil
}

// Register makes workflows known to the worker, which then claims and runs them;
// blocked runs of these workflows are resumed (see Client.Register).
func (w *Worker) Register(ctx context.Context, wfs ...Registrable) error {
	return w.c.Register(ctx, wfs...)
}

// Client returns a client on the worker's store. Runs it starts of workflows this
// worker serves are dispatched to the worker directly when it has a free slot.
// Run closes it.
func (w *Worker) Client() *Client { return w.c }

// Run blocks until ctx ends, then stops the worker gracefully: no new claims,
// active runs get Config.Worker.ShutdownGrace to finish and are then handed back
// for another worker to take over; its store record is removed and the store
// closed. It returns nil after a clean shutdown.
func (w *Worker) Run(ctx context.Context) error {
	<-ctx.Done()
	return w.c.Close()
}

// newRemoteWorker is NewWorker through a server: the client's calls go to the
// HTTP API, the worker's to the worker protocol through the transport that
// store/storeremote registers (internal/workertransport).
func newRemoteWorker(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, chain: newChain(cfg.interceptors())}
	r, err := newRemoteBackend(c)
	if err != nil {
		return nil, err
	}
	c.b = r
	transport := workertransport.New()
	if transport == nil {
		c.Close()
		return nil, fmt.Errorf("trellis worker: no worker transport for Config.Server %q: %s", cfg.Server, workertransport.Import)
	}
	rs, err := transport(workertransport.Config{URL: cfg.Server, Token: cfg.Token, Namespace: cfg.Namespace, TLSConfig: cfg.TLSConfig})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("trellis worker: %w", err)
	}
	r.wstore, r.wclose = rs, rs.Close
	eng, err := engine.New(engine.Config{
		Store: rs, Codec: cfg.Codec, Clock: cfg.Clock, Logger: cfg.Logger,
		MaxPayloadBytes: cfg.MaxPayloadBytes, MaxInlineBackoff: cfg.Worker.MaxInlineBackoff,
		CheckpointTimeout: cfg.Worker.LeaseDuration, Lookup: c.reg.lookup, ErrorType: errorType,
		StepOverride: cfg.StepOverride, InterceptStep: c.chain.interceptStep(),
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	r.engine = eng
	w, err := worker.New(worker.Config{
		Store: rs, Namespace: cfg.Namespace, Queues: cfg.Worker.Queues,
		Workflows: c.reg.names, Versions: c.reg.versions, Name: cfg.Worker.Name,
		Concurrency: cfg.Worker.Concurrency, ClaimBatch: cfg.Worker.ClaimBatch,
		LeaseDuration: cfg.Worker.LeaseDuration, HeartbeatInterval: cfg.Worker.HeartbeatInterval,
		ShutdownGrace: cfg.Worker.ShutdownGrace, PollInterval: cfg.Worker.PollInterval,
		Logger: cfg.Logger, Clock: cfg.Clock, OnClaim: cfg.onClaim(),
	}, &executor{eng: r.engine, chain: c.chain})
	if err != nil {
		c.Close()
		return nil, err
	}
	r.worker = w
	w.Start()
	return &Worker{c: c}, nil
}

// workerRole is a client's worker, in either backend: the store it claims
// from (the client's, or the server's worker protocol for a remote worker),
// the engine that executes the runs, and the worker (nil when the client runs
// none: Config.Worker.Disabled, or a client on a server opened by Open).
type workerRole struct {
	wstore worker.Store
	wclose func() error // closes wstore when it is not the client's store
	worker *worker.Worker
	engine *engine.Engine
}

// serve makes the worker serve the workflows names (just registered): their
// blocked runs are resumed, and the worker's record lists them before serve
// returns, so that every process on the store sees them served (their pending
// runs read no "no live worker" wait reason, and the CLI does not warn of a
// schedule of them).
func (w *workerRole) serve(ctx context.Context, cfg *Config, names []string) error {
	if w.worker == nil {
		return nil
	}
	if _, err := w.wstore.RunsResumeBlocked(ctx, &store.RunsResumeBlockedParams{Namespace: cfg.Namespace, Workflows: names,
		Queues: cfg.Worker.Queues}); err != nil {
		return fmt.Errorf("resuming blocked runs: %w", err)
	}
	if err := w.worker.Announce(ctx); err != nil {
		return err
	}
	w.worker.Wake()
	return nil
}

// stopWorker stops the worker gracefully: Worker.ShutdownGrace for the active
// runs, then a lease's time for the executors to hand runs back.
func (w *workerRole) stopWorker(cfg *Config) error {
	if w.worker == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Worker.ShutdownGrace+cfg.Worker.LeaseDuration)
	defer cancel()
	return w.worker.Stop(ctx)
}
