package trellis

import (
	"context"
	"errors"
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
func NewWorker(ctx context.Context, cfg Config) (*Worker, error) {
	if cfg.Worker.Disabled {
		return nil, errors.New("trellis worker: Config.Worker.Disabled is set")
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
