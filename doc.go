// Package trellis is durable execution for Go: workflows are ordinary Go functions
// whose every step is checkpointed, so a crash, deploy or restart resumes a run where
// it stopped and nothing acknowledged is lost.
//
// Open a client on a store (a SQLite file by default), register workflows, start runs:
//
//	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite:///var/lib/app/trellis.db"})
//	charge := trellis.NewWorkflow("charge-order", func(wc *trellis.Context, o Order) (Receipt, error) {
//		auth, err := trellis.Step(wc, "authorize", func(ctx context.Context) (Auth, error) {
//			return payments.Authorize(ctx, o, trellis.StepInfo(ctx).IdempotencyKey)
//		}, trellis.StepOptions{Timeout: 10 * time.Second})
//		...
//	})
//	db.Register(ctx, charge)
//	h, err := trellis.Start(ctx, db, charge, order, trellis.StartOptions{ID: "order-42"})
//	receipt, err := h.Result(ctx)
//
// # Execution model
//
// A worker that claims a run calls the workflow function from the beginning. Each op
// (Step, Async, TxStep, Context.Now, Context.UUID, Context.Random, Context.Patched,
// Context.Set, Context.Delete, and the waits: Context.Sleep and NewTimer, WaitEvent
// and OnEvent, Approval and RequestApproval, Child and ChildAsync, Map, Select)
// takes the next position in the run's history. When
// history holds a result at that position the op returns it at once; when it holds a
// different op the run stops in the blocked state with a *NonDeterminismError; when it
// holds nothing the op executes and its result is queued for the next checkpoint.
// Queued results are saved in one transaction before the next step starts, and with
// the run's outcome when the function returns, so a step never runs before what
// preceded it is durable.
//
// Steps run at least once; their recorded result is used exactly once. Use
// StepInfo(ctx).IdempotencyKey to make external effects idempotent.
//
// A run that waits for a timer, an event, an approval or child runs is saved as
// waiting and released: it holds no goroutine and no memory in any worker, and the
// store wakes it when what it waits for happens.
//
// Workflow code logs through Context.Logger, whose lines are written once even
// though a run is replayed, and steps through StepLogger(ctx). Every time the engine
// reads or waits for (durable timers, in-place sleeps, retry backoffs, step
// timeouts, the worker's claims and heartbeats, the store's records) comes from
// Config.Clock, so tests can move a fake clock instead of waiting.
//
// Workflow code must be deterministic: no time.Now, no global math/rand, no goroutines
// of its own, no iteration over maps whose order matters, no I/O outside steps. Use the
// Context's helpers and Async instead.
package trellis
