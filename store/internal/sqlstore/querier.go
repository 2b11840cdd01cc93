package sqlstore

import (
	"database/sql"
	"time"
)

// Querier runs statements: on a read pool, or in a transaction. A driver adapts
// its connection, pool or transaction to it, with the context bound.
type Querier interface {
	// QueryRow runs a statement that returns at most one row; with none, the row's
	// Scan returns sql.ErrNoRows.
	QueryRow(query string, args ...any) Scanner
	// Query runs a statement and calls each for its rows, in order, reading them to
	// the end (or until each fails) before it returns.
	Query(query string, args []any, each func(row Scanner) error) error
	// Exec runs a statement and returns the number of rows it changed.
	Exec(query string, args ...any) (int64, error)
}

// Tx is a write transaction of a driver: what the shared state machines write
// through, and the driver's own steps they call.
type Tx interface {
	Querier
	// Now is the transaction's clock reading, the time of everything it writes.
	Now() time.Time
	// Publish queues topics to signal once the transaction commits.
	Publish(topics ...string)
	// CancelGroup cancels the unfinished children of a group (parent sequence,
	// position) as RunCancel does, the last item first, so that cancelling them
	// releases no held child. It stays in the drivers with the rest of
	// cancellation.
	CancelGroup(parentSeq int64, position int) error
}

// ErrNoRows is what a Querier's row returns when there is none.
var ErrNoRows = sql.ErrNoRows
