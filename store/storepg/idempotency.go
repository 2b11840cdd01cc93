package storepg

import (
	"context"

	"github.com/trellis-dev/trellis/store"
)

// Idempotency keys are written once, in sqlstore (idempotency.go). A call that
// records one (RunCreate, EventSend) leaves the group-commit writer, whose batches
// cannot branch, for a transaction of its own (writeGuarded): the key's insert
// comes first, so a concurrent duplicate waits on it and then finds it.

// writeGuarded runs stmts in a transaction of their own between the key's
// IdempotencyBegin and IdempotencyFinish; result builds the call's result from what
// the statements read, or fails it. topics are published on commit.
func (s *Store) writeGuarded(ctx context.Context, namespace string, r *store.IdempotencyRecord,
	topics []string, stmts []stmt, result func() (any, error)) error {
	return s.inTx(ctx, func(tx *wtx) error {
		if err := shared.IdempotencyBegin(stx{tx}, namespace, r); err != nil {
			return err
		}
		for _, st := range stmts {
			if err := runInTx(tx.ctx, tx.Tx, "", st); err != nil {
				return err
			}
		}
		res, err := result()
		if err != nil {
			return err
		}
		tx.publish(topics...)
		return shared.IdempotencyFinish(stx{tx}, namespace, r, res)
	})
}
