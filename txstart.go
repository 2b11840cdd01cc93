package trellis

import (
	"context"
	"fmt"
)

// StartTx starts a run of wf inside tx, the caller's own transaction on the
// store's database (a pgx.Tx on Postgres, a *sql.Tx on the same database file on
// SQLite): the run exists if and only if tx commits, so a business row and the
// workflow that processes it are created together or not at all.
//
// On Postgres, workers are notified when tx commits. On SQLite the store cannot
// see the commit: the run is picked up by a worker's next poll
// (Config.Worker.PollInterval, 1s by default), and the handle's Result also polls.
// A rejected start (ErrRunExists) leaves tx usable. Stores without transactions
// (the remote client) return ErrTxNotSupported.
func StartTx[In, Out any](ctx context.Context, c *Client, tx any, wf *Workflow[In, Out], in In, opts ...StartOptions) (*Handle[Out], error) {
	return startWith(c, "trellis.StartTx", wf, in, opts, func(def *definition, input []byte, o StartOptions) (*Run, error) {
		return callV(ctx, c, ClientCall{Method: "StartTx", Workflow: def.name, Ref: o.ID}, func(ctx context.Context) (*Run, error) {
			if err := checkVersion(o); err != nil {
				return nil, fmt.Errorf("starting %s: %w", def.name, err)
			}
			if err := o.check(); err != nil {
				return nil, fmt.Errorf("starting %s: %w", def.name, err)
			}
			return c.b.startTx(ctx, tx, def, input, o)
		})
	})
}
