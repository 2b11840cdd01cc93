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
// # At-most-once steps
//
// A plain step is at least once: its result is checkpointed after it returns, so
// a worker that dies during an attempt (or between the attempt's return and the
// checkpoint) leaves nothing recorded, and the next owner of the run runs the
// step again. That is right for anything idempotent, and for effects an external
// system deduplicates by StepInfo(ctx).IdempotencyKey ("<run id>/<position>",
// the same for every attempt, replay and takeover): prefer that when the system
// you call accepts a key.
//
// For an effect that must never repeat and that no key can deduplicate (an email,
// a payment through a provider without idempotency keys, a command to a machine),
// StepOptions.AtMostOnce makes the step at most once. Before each attempt the
// engine checkpoints the step, not done, with an attempt row of outcome
// "started"; when the attempt ends, its final record (the failed attempt, or the
// step done) replaces that row. A replay that finds the step not done and its
// last attempt "started" (the worker died), "lost" (its lease expired while it
// ran) or "timed_out" (the server ended it after its timeout) cannot know
// whether the effect happened, so it does not run the function again: it
// records the step done with an error of type "step_outcome_unknown"
// (ErrStepOutcomeUnknown), and every later replay returns that. What the step
// then does is its OnUnknown policy:
//
//   - UnknownReturnError (the default): the step returns a *StepError that is
//     ErrStepOutcomeUnknown (errors.Is), and the workflow decides: look the
//     effect up, compensate, or fail.
//   - UnknownFailRun: the run fails with ErrStepOutcomeUnknown (Result's
//     *RunError is it); the workflow does not see the step return.
//   - UnknownAskApproval: the run waits, holding no worker, for an approval
//     named "<step>: outcome unknown" (StepOptions.UnknownApproval gives its
//     approvers and timeout). Approved: the step runs again, as a new step in
//     history with the idempotency key of the one it repeats. Rejected with a
//     comment starting with "done": the step returns its zero value and no
//     error. Rejected otherwise, or expired: it returns ErrStepOutcomeUnknown.
//
// Only an unknown outcome stops an at-most-once step. A failure an attempt
// reports (its function returned an error, panicked, or ran past
// StepOptions.Timeout) is known and is retried by StepOptions.Retry as for any
// step; with Retry.MaxAttempts 1 the function runs at most once in all. An
// attempt that times out has still run for a while: if it may have taken effect,
// list "step_timeout" in Retry.NonRetryableTypes. A crash between the started
// checkpoint and the call of the function also leaves the outcome unknown: the
// engine cannot tell it from a crash inside the function, and errs on the side
// of not running it. So does a worker that stops (Close) while such an attempt
// still runs past Config.Worker.ShutdownGrace: the attempt is cancelled, the
// run handed back, and its outcome is unknown. The cost is one checkpoint more per attempt, for these
// steps only: the started checkpoint also carries what the run queued before the
// step, which a plain step's attempt checkpoints anyway when there is any. A
// TxStep needs none of this (its writes commit with its record) and ignores the
// option. The worker protocol records the start the same way for the other
// SDKs (docs/worker-protocol.md, "At-most-once steps").
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
// Context's helpers and Async instead. The trellis-vet command (analysis/determinism)
// reports these in workflow functions: go vet -vettool=$(which trellis-vet) ./...
// (docs/determinism.md).
package trellis
