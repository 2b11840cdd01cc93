// Package servermetrics is how a Trellis server records, in the metrics of
// its Config.Metrics (a *trellis.Metrics), what only a server sees: the store
// it serves as a whole, the claims and checkpoints of its remote workers, the
// runs its scheduler starts and its event-stream subscribers. Package trellis
// implements Observer and sets For at init; none of it is part of
// trellis.Metrics's public API, which keeps what a user calls (Handler,
// Registry).
package servermetrics

import (
	"log/slog"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Observer records a server's observations in a *trellis.Metrics.
type Observer interface {
	// ObserveStore makes the metrics cover a store that no client of theirs
	// opened: its group commits, and at scrape time its unfinished runs and the
	// live workers of every namespace. stop ends it.
	ObserveStore(s Store) (stop func())
	// ObserveClaim records the latency of a claim query made for remote
	// workers (trellis_claim_seconds).
	ObserveClaim(d time.Duration)
	// ObserveEndedAttempts counts step attempts that a claim for remote
	// workers recorded as lost or timed out.
	ObserveEndedAttempts(ended []store.EndedAttemptInfo)
	// ObserveRemoteCheckpoint counts what a checkpoint a remote worker made
	// through the server wrote, as the worker's own metrics would.
	ObserveRemoteCheckpoint(workflow string, p *store.CheckpointParams)
	// ObserveStarted counts a run of workflow started other than through a
	// client call: by the server's scheduler.
	ObserveStarted(workflow string)
	// ObserveRemoteRelease counts a run attempt that a remote worker ended by
	// handing its run back through the server.
	ObserveRemoteRelease(workflow string)
	// AddStreamSubscribers adds delta (negative when they leave) to the gauge
	// of open event-stream subscriptions.
	AddStreamSubscribers(delta int)
}

// Store is a store that Observer.ObserveStore covers.
type Store struct {
	// Store is the store.
	Store store.Store
	// URL is the URL the store was opened from, if any: clients opened on the
	// same URL share its database, which is counted once.
	URL string
	// ActiveLeases, when set, is called at scrape time and its count added to
	// trellis_active_leases (a server's: the leases its remote workers hold).
	ActiveLeases func() int
	// Logger receives the errors of the scrape's store reads; default discards.
	Logger *slog.Logger
}

// For returns the Observer of metrics, a *trellis.Metrics (set by package
// trellis; a *trellis.Metrics is the only value it takes).
var For func(metrics any) Observer
