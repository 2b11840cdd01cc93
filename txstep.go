package trellis

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/internal/engine"
)

// ErrTxNotSupported: the client's store cannot run a transactional start or step
// (only the SQL stores can: SQLite and Postgres).
var ErrTxNotSupported = engine.ErrTxNotSupported

// TxStep runs fn as a step whose writes to the store's database commit in one
// transaction with the step's checkpoint: once the step is recorded its writes are
// committed, and a step that did not complete (failed, timed out, lost its lease,
// crashed) committed none of them. Database effects are thus applied exactly once.
//
// tx is a pgx.Tx on Postgres and a *sql.Tx on SQLite; on Postgres, unqualified
// table names resolve in the Trellis schema, then in public. On SQLite fn runs on
// the store's single write connection and other writes wait for it: keep it short.
// fn must not keep tx or use it after returning.
//
// Retries follow opts as for Step; StepOptions.AtMostOnce and OnUnknown are
// ignored (a TxStep's writes are exactly once already). Unlike Step, fn runs to completion even past
// its timeout (the transaction needs it to return), so it should honour ctx. If
// the commit's outcome is unknown (the connection broke), the run stops here and
// is replayed from what the store holds. A store without transactions (the remote
// client) fails the step with ErrTxNotSupported. History records a TxStep as a
// step: Step and TxStep may replace each other under running workflows.
func TxStep[T any](wc *Context, name string, fn func(ctx context.Context, tx any) (T, error), opts ...StepOptions) (T, error) {
	o, err := oneOption("trellis.TxStep", opts)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("step %q: %w", name, err)
	}
	eo := engineOptions(o)
	// Its writes commit with its record, exactly once: StepOptions.AtMostOnce
	// (and OnUnknown) have nothing to add, and are ignored.
	eo.AtMostOnce, eo.FailRunOnUnknown = false, false
	op := wc.rs.TxStep(name, func(ctx context.Context, tx any) (any, error) { return fn(ctx, tx) }, eo, wc.detached)
	return decodeStep[T](wc.rs, op)
}
