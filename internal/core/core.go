// Package core is how a Trellis server works on the engine's core rather than
// on clients of the SDK: one Core per server, on its store, whatever the
// namespace, with the scheduler and the purger that package trellis wires
// for embedded clients too. Each request gets a client of its namespace from
// the core (Core.Client): a value made for the request, not kept, that
// carries the request's idempotency key and the hand-off of the runs it
// starts explicitly (Calls), where a context value carried them before.
//
// Package trellis implements Core (server_core.go) and sets Open at init:
// the core's operations return the SDK's records, which this package cannot
// name.
package core

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/internal/handoff"
	"github.com/trellis-dev/trellis/internal/idemkey"
	"github.com/trellis-dev/trellis/store"
)

// Config configures a server's core.
type Config struct {
	// Store is the server's store; the core does not close it.
	Store           store.Store
	MaxPayloadBytes int
	Logger          *slog.Logger
	// Metrics is the server's *trellis.Metrics (nil: none), TracerProvider
	// its tracer provider (nil: none): the clients' calls record in them.
	Metrics        any
	TracerProvider trace.TracerProvider
	// Clock is the server's clock: of its clients, the scheduler and the
	// purger. nil: the wall clock.
	Clock clock.Clock

	// Scheduler: fire the store's schedules, in the name of Owner (the
	// scheduler starts with StartScheduler).
	Scheduler         bool
	Owner             string
	SchedulerLease    time.Duration
	SchedulerInterval time.Duration
	// Started is told of each run the scheduler starts.
	Started func(*store.Run)
	// Executing reports whether a run of namespace ns is ending through this
	// server (a remote worker's checkpoint that ends it is being written):
	// its outcome comes to Ended, so the results watchers do not read it when
	// the store reports it changed (results.Config.Executing). nil: none.
	Executing func(ns, runID string) bool
	// Pushed reports whether run runID of namespace ns holds a lease that
	// this server pushed to one of its remote workers and that has not ended
	// through it: the checkpoint that ends the run, if it comes through this
	// server, reports the run to Ended, so a wait for it does not read it
	// first (results.Config.Local). It turns false once that checkpoint is
	// written, before Ended. nil: none.
	Pushed func(ns, runID string) bool
	// RetentionInterval is the interval of the purger's passes (deleting
	// expired runs); negative: no purger.
	RetentionInterval time.Duration
}

// Calls is what a request adds to the operations of its client.
type Calls struct {
	// Idempotency is the request's Idempotency-Key: a change it makes writes
	// the key, and the response rendered from its result, in its
	// transaction. nil: none.
	Idempotency *idemkey.Request
	// Handoff offers the slots of remote workers waiting for claims: a run
	// the request starts is created claimed for one. nil: none.
	Handoff handoff.Offer
}

// Core is a server's core.
type Core interface {
	// Client returns a *trellis.Client of namespace ns (validated by the
	// caller) whose calls carry calls.
	Client(ns string, calls Calls) any
	// StartScheduler starts firing schedules (Config.Scheduler).
	StartScheduler()
	// StopScheduler stops the scheduler: its lease passes to another
	// process at once.
	StopScheduler(ctx context.Context) error
	// WaitRuns waits in namespace ns for every run of ids (run IDs, each
	// once) to end, or for ctx: ended gets each run as it ends, a
	// *trellis.Run, or nil when no such run exists; idle is called whenever
	// none more is at hand. It returns ctx's error when ctx ended first. The
	// runs share the namespace's results watcher with every other wait.
	WaitRuns(ctx context.Context, ns string, ids []string, ended func(id string, run any), idle func()) error
	// Ended reports the outcome of a checkpoint of run runID of namespace ns
	// that Executing reported: final, the run as it left it (store.FinalRun),
	// goes to those waiting for it here without a read, so that a result long
	// poll answers as soon as the checkpoint is written, before the worker
	// hears back; nil (the run did not end, or its final state is not known
	// here) has the run read again. A run nobody here waits for is let be.
	Ended(ns, runID string, final *store.Run)
	// StopPurger stops the purger: a batch in flight deletes nothing or all
	// of its runs.
	StopPurger()
	// Close stops the purger and the results watchers of the namespaces
	// waited in.
	Close()
}

// Open returns a server's core (set by package trellis).
var Open func(Config) (Core, error)
